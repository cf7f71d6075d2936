#!/usr/bin/env bash
# A real Kubernetes control plane on this machine, in its own network namespace: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kwok playing the kubelets of 3 nodes (4 CPU, 16Gi, 110 pods, no
# taints). Nothing it starts can send traffic off the machine: every process runs in the network namespace
# drl-k8s-NAME, which has only `lo` and no route off the machine; the pod range 10.244.0.0/16 and the service
# range 10.96.0.0/16 are local addresses there, so the API server's pod-proxy and log calls end at once inside it.
#
#   sudo bash scripts/local-cluster.sh up   [NAME]   start it (or say it is up); prints how to reach it
#   sudo bash scripts/local-cluster.sh env  [NAME]   shell exports: KUBECONFIG, PATH with the tools, DRL_CLUSTER_NETNS
#   sudo bash scripts/local-cluster.sh down [NAME]   stop every process, delete the namespace and the state
#   sudo bash scripts/local-cluster.sh net  [NAME]   only make the network namespace (the cluster tier checks it
#                                                    has no route off the machine before it starts anything)
#
# NAME defaults to drl. The state (certificates, kubeconfigs, etcd's data, one log per process, pid files) is in
# ${DRL_CLUSTER_DIR:-$HOME/.cache/drl/clusters/NAME}. Needs root (network namespaces), iproute2, openssl and the
# tools that `bash scripts/k8s-tools.sh` builds (Kubernetes v1.34.12, etcd, kwok, helm). Reach it with e.g.
#
#   sudo ip netns exec drl-k8s-drl env KUBECONFIG=$HOME/.cache/drl/clusters/drl/admin.kubeconfig kubectl get nodes
#
# Nodes are kwok's: no container runs. A pod scheduled on a node becomes Running and Ready at once (kwok's
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

NAME="${2:-drl}"
NETNS="drl-k8s-$NAME"
STATE="${DRL_CLUSTER_DIR:-$HOME/.cache/drl/clusters/$NAME}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
POD_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
NODES="kwok-node-0 kwok-node-1 kwok-node-2"
PROCS="etcd kube-apiserver kube-controller-manager kube-scheduler kwok"
MARK=".drl-local-cluster"

say() { echo "local-cluster: $*" >&2; }
die() { say "$*"; exit 1; }

usage() {
  echo "usage: $0 up|down|env|net [NAME]   (NAME defaults to drl)" >&2
  exit 2
}

[[ "$NAME" =~ ^[a-z0-9][a-z0-9-]{0,30}$ ]] || die "NAME must be lower-case letters, digits and dashes (at most 31), not '$NAME'"

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (it makes a network namespace): run it with sudo"
  command -v ip >/dev/null 2>&1 || die "'ip' (iproute2) is not installed: apt-get install iproute2"
}

tools_dir() {
  bash "$ROOT/scripts/k8s-tools.sh" --dir
}

need_tools() {
  if ! bash "$ROOT/scripts/k8s-tools.sh" --check; then
    die "the cluster tools are not built in $(tools_dir): run bash scripts/k8s-tools.sh (about 20 minutes once)"
  fi
  command -v openssl >/dev/null 2>&1 || die "'openssl' is not installed: apt-get install openssl"
  command -v setsid >/dev/null 2>&1 || die "'setsid' (util-linux) is not installed"
}

netns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF "$NETNS"; }

in_ns() { ip netns exec "$NETNS" "$@"; }

# -- the network namespace -------------------------------------------------------------------------------------

make_netns() {
  if ! netns_exists; then
    ip netns add "$NETNS"
  fi
  ip -n "$NETNS" link set lo up
  for cidr in "$POD_CIDR" "$SERVICE_CIDR"; do
    ip -n "$NETNS" route replace local "$cidr" dev lo table local
  done
}

# Refuses to go on unless the namespace has only lo and no route that leaves through anything else.
check_netns() {
  local links routes
  links="$(ip -n "$NETNS" -o link show | awk -F': ' '{print $2}' | sed 's/@.*//')"
  [ "$links" = "lo" ] || die "namespace $NETNS has links other than lo: $(echo $links); refusing to start anything"
  routes="$( { ip -n "$NETNS" -4 route show table all; ip -n "$NETNS" -6 route show table all; } 2>/dev/null)"
  if grep -qE '^(default|unreachable default)' <<<"$routes"; then
    die "namespace $NETNS has a default route; refusing to start anything"
  fi
  if grep -vE '(^|[[:space:]])dev lo([[:space:]]|$)' <<<"$routes" | grep -q .; then
    die "namespace $NETNS has a route through something else than lo: $(grep -v 'dev lo' <<<"$routes" | head -1)"
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
  cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
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
  for p in $PROCS; do alive "$p" || return 1; done
  kubectl_ get --raw /readyz >/dev/null 2>&1
}

reach() {
  cat <<EOF
local-cluster: '$NAME' is up: Kubernetes v1.34.12, 3 kwok nodes, in network namespace $NETNS (only lo).
Reach it from inside the namespace:
  sudo ip netns exec $NETNS env KUBECONFIG=$STATE/admin.kubeconfig $TOOLS/bin/kubectl get nodes
or in a shell there:
  sudo ip netns exec $NETNS bash -c 'eval "\$(bash $ROOT/scripts/local-cluster.sh env $NAME)"; exec bash'
Logs: $STATE/logs/; stop it: sudo bash scripts/local-cluster.sh down $NAME
EOF
}

up() {
  need_root
  need_tools
  TOOLS="$(tools_dir)"
  if [ -f "$STATE/$MARK" ] && is_up; then
    reach
    return 0
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
  mkdir -p "$STATE/logs" "$STATE/run" "$STATE/etcd" "$STATE/kwok-home" "$STATE/logfiles"
  touch "$STATE/$MARK"
  chmod 700 "$STATE/etcd"
  make_pki
  kwok_config "$TOOLS"
  local pki="$STATE/pki" b="$TOOLS/bin"

  start etcd "$b/etcd" --name default --data-dir "$STATE/etcd" --unsafe-no-fsync \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster default=http://127.0.0.1:2380 --log-level warn

  start kube-apiserver "$b/kube-apiserver" \
    --etcd-servers http://127.0.0.1:2379 \
    --bind-address 127.0.0.1 --secure-port 6443 --advertise-address 127.0.0.1 \
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
    --endpoint-reconciler-type none \
    --allow-privileged=true \
    --profiling=false

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
  wait_for 30 "the default ServiceAccount" default_sa
  say "up in $((SECONDS - t0)) s"
  reach
}

# -- down --------------------------------------------------------------------------------------------------------

down_quiet() {
  local p pid pids
  # Every process started by `start` leads its own process group: end the groups, then anything still in the
  # namespace (a process whose pid file was lost).
  for p in $PROCS; do
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
  for p in $PROCS; do
    pid="$(cat "$STATE/run/$p.pid" 2>/dev/null || true)"
    [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null || true
  done
  if [ -f "$STATE/$MARK" ]; then
    rm -rf "$STATE"
  fi
}

down() {
  need_root
  if ! netns_exists && [ ! -f "$STATE/$MARK" ]; then
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
  cat <<EOF
export KUBECONFIG=$STATE/admin.kubeconfig
export PATH=$tools/bin:\$PATH
export DRL_CLUSTER_NETNS=$NETNS
export KUBECACHEDIR=$STATE/kube-cache
# the API server listens only inside the network namespace $NETNS: run commands there, as root, e.g.
#   ip netns exec $NETNS kubectl get nodes
EOF
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) env_ ;;
  net) need_root; make_netns; check_netns; echo "$NETNS" ;;
  *) usage ;;
esac
