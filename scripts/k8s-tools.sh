#!/usr/bin/env bash
# Builds the pinned Kubernetes tools that the cluster tier and scripts/local-cluster.sh run: kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, etcd, kwok and helm, from the Go module proxy with the
# machine's Go, into a cache folder outside the repository keyed by the versions. Does nothing when they are
# there. A fresh machine pays the cold build once (about 20 minutes on 2 cores); Go's own caches make a rebuild
# take seconds.
#
#   bash scripts/k8s-tools.sh            build (or find) the tools; prints the folder they are in
#   bash scripts/k8s-tools.sh --dir      print the folder only (built or not)
#   bash scripts/k8s-tools.sh --check    exit 0 when every tool is there, 1 otherwise
set -euo pipefail

KUBERNETES_VERSION=v1.34.12
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
HELM_VERSION=v4.3.1
TOOLS="kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok helm"

key="k8s-${KUBERNETES_VERSION}-etcd-${ETCD_VERSION}-kwok-${KWOK_VERSION}-helm-${HELM_VERSION}"
dir="${DRL_K8S_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/drl/$key}"

complete() {
  for t in $TOOLS; do [ -x "$dir/bin/$t" ] || return 1; done
  [ -f "$dir/kwok/stages.yaml" ]
}

case "${1:-}" in
  --dir) echo "$dir"; exit 0 ;;
  --check) complete; exit $? ;;
  "") ;;
  *) echo "usage: $0 [--dir|--check]" >&2; exit 2 ;;
esac

if complete; then
  echo "$dir"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "k8s-tools: the cluster tools are built with Go (1.24 or newer), which is not on PATH" >&2
  exit 1
fi

say() { echo "k8s-tools: $*" >&2; }
mkdir -p "$dir/bin" "$dir/kwok"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
start=$SECONDS

build_kubernetes() {
  local kv="${KUBERNETES_VERSION#v}" major minor staging
  major="${kv%%.*}"; minor="${kv#*.}"; minor="${minor%%.*}"
  staging="v0.${kv#*.}"
  mkdir -p "$work/kubernetes"
  cd "$work/kubernetes"
  printf 'module drl.local/k8stools\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes %s\n' "$KUBERNETES_VERSION" > go.mod
  say "reading k8s.io/kubernetes@$KUBERNETES_VERSION's staging modules"
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  # k/k requires each staging module at v0.0.0 and replaces it with ./staging/src/...; outside k/k the published
  # module at the matching v0.x.y takes that place.
  grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}' >> go.mod
  say "$(grep -c '^replace' go.mod) staging modules replaced at $staging"
  local ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ld="$ld -X $pkg.gitTreeState=clean"
  done
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    [ -x "$dir/bin/$cmd" ] && continue
    say "building $cmd $KUBERNETES_VERSION ($((SECONDS - start)) s so far)"
    go build -trimpath -ldflags "$ld" -o "$work/$cmd" "k8s.io/kubernetes/cmd/$cmd"
    mv "$work/$cmd" "$dir/bin/$cmd"
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

say "building the cluster tools into $dir (a fresh machine takes about 20 minutes; later runs reuse it)"
build_kubernetes
build_etcd
build_kwok
build_helm
printf 'kubernetes %s\netcd %s\nkwok %s\nhelm %s\n' "$KUBERNETES_VERSION" "$ETCD_VERSION" "$KWOK_VERSION" "$HELM_VERSION" > "$dir/VERSIONS"
say "done in $((SECONDS - start)) s"
echo "$dir"
