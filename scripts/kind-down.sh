#!/usr/bin/env bash
# Removes the helm release from the kind cluster and deletes the cluster.
#
#   scripts/kind-down.sh                   uninstall the release, then delete the cluster
#   scripts/kind-down.sh --keep-cluster    only uninstall the release (the cluster and its loaded image stay)
#
# Environment: DRL_KIND_CLUSTER (drl), DRL_RELEASE (drl), DRL_NAMESPACE (default).
# Exits 2 when a tool it needs is missing or on an unknown option.
set -euo pipefail
cd "$(dirname "$0")/.."

keep_cluster=0
for arg in "$@"; do
  case "$arg" in
    --keep-cluster) keep_cluster=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "kind-down: unknown option '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "kind-down: '$1' is not on PATH; install it: $2" >&2
    exit 2
  fi
}
need kind https://kind.sigs.k8s.io/docs/user/quick-start/#installation
need helm https://helm.sh/docs/intro/install/

cluster="${DRL_KIND_CLUSTER:-drl}"
release="${DRL_RELEASE:-drl}"
namespace="${DRL_NAMESPACE:-default}"
context="kind-$cluster"

clusters="$(kind get clusters 2>/dev/null || true)"
if ! grep -qxF "$cluster" <<<"$clusters"; then
  echo "kind-down: no kind cluster '$cluster'; nothing to do"
  exit 0
fi

if helm status "$release" --kube-context "$context" --namespace "$namespace" >/dev/null 2>&1; then
  echo "kind-down: uninstalling release '$release' (namespace $namespace)"
  helm uninstall "$release" --kube-context "$context" --namespace "$namespace" --wait
else
  echo "kind-down: no release '$release' in namespace $namespace"
fi

if [ "$keep_cluster" = 1 ]; then
  echo "kind-down: cluster '$cluster' kept"
else
  echo "kind-down: deleting cluster '$cluster'"
  kind delete cluster --name "$cluster"
fi
