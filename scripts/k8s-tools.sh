#!/usr/bin/env bash
# Builds the pinned Kubernetes tools that the cluster tier and scripts/local-cluster.sh run, from the Go module
# proxy with the machine's Go, into cache folders outside the repository keyed by the versions:
#
#   control plane   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kwok, helm
#                   in ~/.cache/drl/k8s-<versions>               (about 20 minutes cold on 2 cores)
#   node            kubelet, kube-proxy (the same Kubernetes version) and CoreDNS, for local-cluster.sh's
#                   real node, in ~/.cache/drl/node-<versions>   (about 10 minutes cold, CoreDNS most of it)
#
# Does nothing for what is there; each folder is complete or rebuilt on its own, so a new node version leaves
# the control plane's folder as it is. Go's own caches make a rebuild take seconds to a minute.
#
#   bash scripts/k8s-tools.sh [PART]          build (or find) the tools; prints the control plane's folder
#   bash scripts/k8s-tools.sh --dir           print the control plane's folder (built or not)
#   bash scripts/k8s-tools.sh --node-dir      print the node tools' folder (built or not)
#   bash scripts/k8s-tools.sh --check [PART]  exit 0 when every tool is there, 1 otherwise (naming what is missing)
#
# PART: all (default), control-plane or node.
set -euo pipefail

KUBERNETES_VERSION=v1.34.12
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
HELM_VERSION=v4.3.1
COREDNS_VERSION=v1.14.7
TOOLS="kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok helm"
NODE_TOOLS="kubelet kube-proxy coredns"

key="k8s-${KUBERNETES_VERSION}-etcd-${ETCD_VERSION}-kwok-${KWOK_VERSION}-helm-${HELM_VERSION}"
dir="${DRL_K8S_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/drl/$key}"
node_key="node-k8s-${KUBERNETES_VERSION}-coredns-${COREDNS_VERSION}"
node_dir="${DRL_K8S_NODE_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/drl/$node_key}"

# missing PART: prints the tools of PART that are not there, one per line.
missing() {
  local t
  if [ "$1" != node ]; then
    for t in $TOOLS; do [ -x "$dir/bin/$t" ] || echo "$dir/bin/$t"; done
    [ -f "$dir/kwok/stages.yaml" ] || echo "$dir/kwok/stages.yaml"
  fi
  if [ "$1" != control-plane ]; then
    for t in $NODE_TOOLS; do [ -x "$node_dir/bin/$t" ] || echo "$node_dir/bin/$t"; done
  fi
  return 0
}

complete() { [ -z "$(missing "$1")" ]; }

part() {
  case "${1:-all}" in
    all|control-plane|node) echo "${1:-all}" ;;
    *) echo "usage: $0 [--dir|--node-dir|--check] [all|control-plane|node]" >&2; exit 2 ;;
  esac
}

case "${1:-}" in
  --dir) echo "$dir"; exit 0 ;;
  --node-dir) echo "$node_dir"; exit 0 ;;
  --check)
    what="$(part "${2:-}")"
    gone="$(missing "$what")"
    [ -z "$gone" ] && exit 0
    echo "k8s-tools: missing (bash scripts/k8s-tools.sh builds them):" $gone >&2
    exit 1 ;;
  -*) part bad ;;
  *) PART="$(part "${1:-}")" ;;
esac

if complete "$PART"; then
  echo "$dir"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "k8s-tools: the cluster tools are built with Go (1.24 or newer), which is not on PATH" >&2
  exit 1
fi

say() { echo "k8s-tools: $*" >&2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
start=$SECONDS

# The wrapper module that builds commands of k8s.io/kubernetes, made once per run in $work/kubernetes.
kubernetes_module() {
  local kv="${KUBERNETES_VERSION#v}" staging gomod
  staging="v0.${kv#*.}"
  mkdir -p "$work/kubernetes"
  cd "$work/kubernetes"
  [ -f go.mod ] && return 0
  printf 'module drl.local/k8stools\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes %s\n' "$KUBERNETES_VERSION" > go.mod
  say "reading k8s.io/kubernetes@$KUBERNETES_VERSION's staging modules"
  gomod="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  # k/k requires each staging module at v0.0.0 and replaces it with ./staging/src/...; outside k/k the published
  # module at the matching v0.x.y takes that place.
  grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}' >> go.mod
  say "$(grep -c '^replace' go.mod) staging modules replaced at $staging"
}

# build_kubernetes DEST CMD...: builds the commands of k8s.io/kubernetes/cmd that DEST/bin lacks.
build_kubernetes() {
  local dest="$1" kv="${KUBERNETES_VERSION#v}" major minor cmd todo=""
  shift
  for cmd in "$@"; do [ -x "$dest/bin/$cmd" ] || todo="$todo $cmd"; done
  [ -n "$todo" ] || return 0
  major="${kv%%.*}"; minor="${kv#*.}"; minor="${minor%%.*}"
  mkdir -p "$dest/bin"
  kubernetes_module
  local ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ld="$ld -X $pkg.gitTreeState=clean"
  done
  for cmd in $todo; do
    say "building $cmd $KUBERNETES_VERSION ($((SECONDS - start)) s so far)"
    go build -trimpath -ldflags "$ld" -o "$work/$cmd" "k8s.io/kubernetes/cmd/$cmd"
    mv "$work/$cmd" "$dest/bin/$cmd"
  done
}

build_etcd() {
  [ -x "$dir/bin/etcd" ] && return 0
  say "building etcd $ETCD_VERSION ($((SECONDS - start)) s so far)"
  mkdir -p "$work/etcd"
  cd "$work/etcd"
  printf 'module drl.local/etcd\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > go.mod
  printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' > main.go
  go mod tidy >/dev/null 2>&1 || go mod tidy
  go build -trimpath -ldflags "-s -w" -o "$work/etcd-bin" .
  mv "$work/etcd-bin" "$dir/bin/etcd"
}

build_kwok() {
  if [ ! -x "$dir/bin/kwok" ]; then
    say "building kwok $KWOK_VERSION ($((SECONDS - start)) s so far)"
    GOBIN="$work/gobin" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
    mv "$work/gobin/kwok" "$dir/bin/kwok"
  fi
  # kwok has no built-in stages: the node and pod lifecycles come from its kustomize/stage folder. Not
  # pod-complete, which would end every Job pod at once.
  local src
  src="$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  : > "$work/stages.yaml"
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-delete.yaml; do
    if [ ! -f "$src/kustomize/stage/$f" ]; then
      say "kwok's stage $f is missing from $src/kustomize/stage"; exit 1
    fi
    { echo "---"; cat "$src/kustomize/stage/$f"; } >> "$work/stages.yaml"
  done
  mv "$work/stages.yaml" "$dir/kwok/stages.yaml"
}

build_helm() {
  [ -x "$dir/bin/helm" ] && return 0
  say "building helm $HELM_VERSION ($((SECONDS - start)) s so far)"
  GOBIN="$work/gobin" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
  mv "$work/gobin/helm" "$dir/bin/helm"
}

# CoreDNS is its own main module (its plugins are chosen by its plugin.cfg at release time): go install builds
# exactly the released binary.
build_coredns() {
  [ -x "$node_dir/bin/coredns" ] && return 0
  say "building coredns $COREDNS_VERSION ($((SECONDS - start)) s so far; about 8 minutes with cold Go caches)"
  GOBIN="$work/gobin" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
  mv "$work/gobin/coredns" "$node_dir/bin/coredns"
}

if [ "$PART" != node ] && ! complete control-plane; then
  say "building the control plane's tools into $dir (a fresh machine takes about 20 minutes; later runs reuse it)"
  mkdir -p "$dir/bin" "$dir/kwok"
  build_kubernetes "$dir" kube-apiserver kube-controller-manager kube-scheduler kubectl
  build_etcd
  build_kwok
  build_helm
  printf 'kubernetes %s\netcd %s\nkwok %s\nhelm %s\n' "$KUBERNETES_VERSION" "$ETCD_VERSION" "$KWOK_VERSION" "$HELM_VERSION" > "$dir/VERSIONS"
fi
if [ "$PART" != control-plane ] && ! complete node; then
  say "building the node's tools into $node_dir (about 10 minutes with cold Go caches; later runs reuse it)"
  mkdir -p "$node_dir/bin"
  build_kubernetes "$node_dir" kubelet kube-proxy
  build_coredns
  printf 'kubernetes %s\ncoredns %s\n' "$KUBERNETES_VERSION" "$COREDNS_VERSION" > "$node_dir/VERSIONS"
fi
say "done in $((SECONDS - start)) s"
echo "$dir"
