#!/usr/bin/env bash
# Creates the local kind cluster (unless it exists), builds the drl image and loads it into the cluster's nodes.
#
#   scripts/kind-up.sh [docker build options...]     e.g. --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
#
# Environment: DRL_KIND_CLUSTER (cluster name, default drl), DRL_IMAGE (image name:tag, default drl:dev).
# Next: scripts/kind-deploy.sh; at the end: scripts/kind-down.sh. Exits 2 when a tool it needs is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "kind-up: '$1' is not on PATH; install it: $2" >&2
    exit 2
  fi
}
need docker https://docs.docker.com/engine/install/
need kind https://kind.sigs.k8s.io/docs/user/quick-start/#installation
need kubectl https://kubernetes.io/docs/tasks/tools/

cluster="${DRL_KIND_CLUSTER:-drl}"
image="${DRL_IMAGE:-drl:dev}"

if ! docker info >/dev/null 2>&1; then
  echo "kind-up: docker is installed but its engine does not answer (is the daemon running, may this user use it?)" >&2
  exit 2
fi

clusters="$(kind get clusters 2>/dev/null || true)"
if grep -qxF "$cluster" <<<"$clusters"; then
  echo "kind-up: cluster '$cluster' exists"
else
  echo "kind-up: creating cluster '$cluster'"
  kind create cluster --name "$cluster" --wait 120s
fi

echo "kind-up: building $image from docker/Dockerfile"
docker build -f docker/Dockerfile -t "$image" "$@" .

echo "kind-up: loading $image into the nodes of '$cluster'"
kind load docker-image "$image" --name "$cluster"

kubectl --context "kind-$cluster" get nodes
echo "kind-up: ready; deploy with: scripts/kind-deploy.sh"
