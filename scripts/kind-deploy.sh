#!/usr/bin/env bash
# Installs the chart (./helm) into the kind cluster made by scripts/kind-up.sh, using the image loaded there,
# and follows the trainer until its Job completes.
#
#   scripts/kind-deploy.sh [helm install options...]     e.g. --set steps=2000 --set mode=async
#
# Environment (default):
#   DRL_KIND_CLUSTER (drl)  DRL_RELEASE (drl)  DRL_NAMESPACE (default)  DRL_IMAGE (drl:dev, name:tag)
#   DRL_PRESET (sac)  DRL_WORKERS (2)  DRL_MODE, DRL_STEPS (the chart's defaults when unset)
#   DRL_FOLLOW (logs): logs = stream the trainer's log, then wait for its Job; wait = only wait; none = return
#                      once installed
#   DRL_TIMEOUT (900): seconds to wait for the trainer Job
# Exits 0 when the trainer Job completes (or at once with DRL_FOLLOW=none), 1 when it fails, 124 on timeout,
# 2 when a tool is missing, the cluster is not there or the release exists already.
set -euo pipefail
cd "$(dirname "$0")/.."

need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "kind-deploy: '$1' is not on PATH; install it: $2" >&2
    exit 2
  fi
}
need helm https://helm.sh/docs/intro/install/
need kubectl https://kubernetes.io/docs/tasks/tools/

cluster="${DRL_KIND_CLUSTER:-drl}"
release="${DRL_RELEASE:-drl}"
namespace="${DRL_NAMESPACE:-default}"
image="${DRL_IMAGE:-drl:dev}"
follow="${DRL_FOLLOW:-logs}"
timeout_s="${DRL_TIMEOUT:-900}"
context="kind-$cluster"

case "$follow" in
  logs|wait|none) ;;
  *) echo "kind-deploy: DRL_FOLLOW must be logs, wait or none (not '$follow')" >&2; exit 2 ;;
esac
if [ ! -f helm/Chart.yaml ]; then
  echo "kind-deploy: no chart at ./helm (helm/Chart.yaml is missing)" >&2
  exit 2
fi
contexts="$(kubectl config get-contexts -o name 2>/dev/null || true)"
if ! grep -qxF "$context" <<<"$contexts"; then
  echo "kind-deploy: no kubectl context '$context'; create the cluster first: scripts/kind-up.sh" >&2
  exit 2
fi
k() { kubectl --context "$context" --namespace "$namespace" "$@"; }

if helm status "$release" --kube-context "$context" --namespace "$namespace" >/dev/null 2>&1; then
  echo "kind-deploy: release '$release' exists in namespace $namespace (its Jobs cannot be changed in place);" \
       "remove it first: DRL_RELEASE=$release DRL_NAMESPACE=$namespace scripts/kind-down.sh --keep-cluster" >&2
  exit 2
fi

repository="${image%:*}"
tag="${image##*:}"
if [ "$repository" = "$image" ] || [[ "$tag" == */* ]]; then
  echo "kind-deploy: DRL_IMAGE must be name:tag (not '$image')" >&2
  exit 2
fi

values=(--set "image.repository=$repository" --set "image.tag=$tag"
        --set "preset=${DRL_PRESET:-sac}" --set "workers=${DRL_WORKERS:-2}")
if [ -n "${DRL_MODE:-}" ]; then values+=(--set "mode=$DRL_MODE"); fi
if [ -n "${DRL_STEPS:-}" ]; then values+=(--set "steps=$DRL_STEPS"); fi

echo "kind-deploy: helm install $release ./helm (cluster $cluster, namespace $namespace, image $image)"
helm install "$release" ./helm --kube-context "$context" --namespace "$namespace" --create-namespace \
  "${values[@]}" "$@"

# The trainer Job is the release's Job whose name ends in -trainer (docs/kubernetes.md: <name>-trainer).
job="$(helm get manifest "$release" --kube-context "$context" --namespace "$namespace" \
         | k get -f - -o name | sed -n 's|^job\.batch/\(.*-trainer\)$|\1|p' | head -n 1)"
if [ -z "$job" ]; then
  echo "kind-deploy: the release has no trainer Job (<name>-trainer); objects:" >&2
  helm get manifest "$release" --kube-context "$context" --namespace "$namespace" | k get -f - >&2 || true
  exit 1
fi
echo "kind-deploy: trainer Job: $job (namespace $namespace)"
if [ "$follow" = none ]; then
  echo "kind-deploy: follow it with: kubectl --context $context -n $namespace logs -f job/$job"
  exit 0
fi

if [ "$follow" = logs ]; then
  k logs -f "job/$job" --pod-running-timeout=10m || echo "kind-deploy: log stream ended early; waiting for the Job"
fi

job_state() {
  k get "job/$job" -o jsonpath='{.status.conditions[?(@.status=="True")].type}' 2>/dev/null || true
}
deadline=$((SECONDS + timeout_s))
while :; do
  state=" $(job_state) "
  case "$state" in
    *" Complete "*)
      echo "kind-deploy: $job complete. Evaluations: kubectl --context $context -n $namespace logs job/${job%-trainer}-evaluator"
      echo "kind-deploy: remove the release with: DRL_RELEASE=$release DRL_NAMESPACE=$namespace scripts/kind-down.sh --keep-cluster"
      exit 0 ;;
    *" Failed "*)
      echo "kind-deploy: $job failed" >&2
      k get pods -l "job-name=$job" >&2 || true
      k describe "job/$job" >&2 || true
      exit 1 ;;
  esac
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "kind-deploy: $job not complete after ${timeout_s}s" >&2
    k get pods >&2 || true
    exit 124
  fi
  sleep 5
done
