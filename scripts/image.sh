#!/usr/bin/env bash
# Builds the drl image (docker/Dockerfile): with docker where its engine answers, else with podman. A podman build
# that cannot reach Docker Hub (no python:3.11-slim to pull) runs on a base made here with debootstrap (Debian
# bookworm's python3, imported as localhost/drl-base:bookworm), so the image can be built on a machine that only
# reaches Debian's and Python's package registries.
#
#   scripts/image.sh [--tag NAME:TAG] [--engine docker|podman] [--local-base] [--if-missing] [build options...]
#   scripts/image.sh --print-tag          the content tag: localhost/drl:ctx-<hash of what the build copies>
#   scripts/image.sh --containers-conf    the containers.conf podman is run with here (written if needed; empty:
#                                         the machine's own), for running the image as the build does
#
#   --tag NAME:TAG   the image to build (default drl:dev, the name the kind scripts load)
#   --file F, --context DIR   another Containerfile and its context (default docker/Dockerfile and .), built the
#                    same way (the containers test tier's S3 stand-in)
#   --engine E       docker or podman (default: docker when its engine answers, else podman)
#   --local-base     podman: use the debootstrap base even where Docker Hub answers
#   --if-missing     build only when the tag is not there yet (the containers test tier reuses its image so)
#   build options    passed to `docker build` / `podman build`, e.g. --build-arg DRL_EXTRAS=kubernetes
#
# A podman build's pip sees what this machine's pip sees: its index, its find-links (e.g. a local torch wheel) and
# its CA bundle, mounted read-only for the RUN steps. Where https://download.pytorch.org cannot be reached, torch
# comes from that index (TORCH_INDEX_URL; with a local CPU wheel in find-links, that wheel). podman runs with a
# containers.conf written here unless the machine has one: runc where installed (crun fails on hosts with hybrid
# cgroups) and ulimits every host grants. Environment: DRL_PIP_INDEX (default: pip's index-url, else PyPI),
# DRL_DEBIAN_MIRROR (debootstrap's, default http://deb.debian.org/debian). The debootstrap base needs root.
# Exits 2 when no engine can build.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=localhost/drl-base:bookworm
tag=drl:dev
file=docker/Dockerfile
context=.
engine=""
local_base=0
if_missing=0
print_tag=0
print_conf=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --file) file="$2"; shift 2 ;;
    --context) context="$2"; shift 2 ;;
    --engine) engine="$2"; shift 2 ;;
    --local-base) local_base=1; shift ;;
    --if-missing) if_missing=1; shift ;;
    --print-tag) print_tag=1; shift ;;
    --containers-conf) print_conf=1; engine=podman; shift ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) extra+=("$1"); shift ;;
  esac
done

say() { echo "image.sh: $*" >&2; }

# The hash of everything the build copies (docker/Dockerfile's COPY lines, less .dockerignore's caches) and of the
# build options: the same tree gives the same tag, so a built image is found again instead of rebuilt.
content_tag() {
  {
    printf '%s\n' "${extra[@]+"${extra[@]}"}"
    find docker/Dockerfile docker/requirements.py pyproject.toml README.md drl services orchestrator -type f \
      ! -path '*/__pycache__/*' ! -name '*.py[co]' ! -path '*.egg-info/*' ! -name '*.safetensors' ! -name '*.log' \
      -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16 | sed 's/^/localhost\/drl:ctx-/'
}

if [ "$print_tag" = 1 ]; then
  content_tag
  exit 0
fi

if [ -z "$engine" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    engine=docker
  elif command -v podman >/dev/null 2>&1; then
    engine=podman
  else
    say "no engine: docker's does not answer here and podman is not installed (apt-get install podman runc iptables)"
    exit 2
  fi
fi

reachable() { curl -sS -o /dev/null --max-time 8 "$1" 2>/dev/null; }

if [ "$engine" = podman ] && [ -z "${CONTAINERS_CONF:-}" ] && [ ! -e /etc/containers/containers.conf ]; then
  # limits every host grants (some refuse podman's defaults) and runc, not crun (crun fails on hosts with hybrid
  # cgroups); a containers.conf of the machine's own, or CONTAINERS_CONF, wins
  conf="${XDG_CACHE_HOME:-$HOME/.cache}/drl-image/containers.conf"
  mkdir -p "$(dirname "$conf")"
  printf '[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n' >"$conf"
  if command -v runc >/dev/null 2>&1; then
    printf '\n[engine]\nruntime = "runc"\n' >>"$conf"
  fi
  export CONTAINERS_CONF="$conf"
fi
if [ "$print_conf" = 1 ]; then
  echo "${CONTAINERS_CONF:-}"
  exit 0
fi

if [ "$if_missing" = 1 ] && "$engine" image inspect "$tag" >/dev/null 2>&1; then
  say "$tag is there already"
  exit 0
fi

make_base() {
  # Debian bookworm's python3 (3.11) and venv module, nothing else: the Dockerfile's two stages need no more.
  if podman image exists "$BASE"; then
    return
  fi
  if [ "$(id -u)" != 0 ] || ! command -v debootstrap >/dev/null 2>&1; then
    say "Docker Hub cannot be reached and the local base $BASE needs root and debootstrap (apt-get install debootstrap)"
    exit 2
  fi
  local root
  root="$(mktemp -d /var/tmp/drl-base.XXXXXX)"
  trap 'rm -rf "$root"' EXIT
  say "making $BASE with debootstrap"
  debootstrap --variant=minbase bookworm "$root" "${DRL_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >/dev/null
  chroot "$root" apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
  tar -C "$root" -c . | podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' - "$BASE" >/dev/null
  rm -rf "$root"
  trap - EXIT
}

args=(-f "$file" -t "$tag")
has_arg() { printf '%s\n' "${extra[@]+"${extra[@]}"}" | grep -q "^$1="; }
if [ "$engine" = podman ]; then
  args+=(--network host)
  if ! has_arg BASE_IMAGE && { [ "$local_base" = 1 ] || ! reachable https://registry-1.docker.io/v2/; }; then
    make_base
    args+=(--build-arg "BASE_IMAGE=$BASE")
  fi
fi
index="${DRL_PIP_INDEX:-$(python3 -m pip config get global.index-url 2>/dev/null || true)}"
if [ "$engine" = podman ]; then
  # pip in the build sees what the host's pip sees: its index, its find-links (a local torch wheel, mounted at
  # /mnt) and its CA bundle (at /srv), read-only and for the RUN steps only. /mnt and /srv exist in the base, so
  # they stay empty in the image; /etc/pip.conf does not, so an empty one stays (a build mount's mount point).
  links="${PIP_FIND_LINKS:-$(python3 -m pip config get global.find-links 2>/dev/null || true)}"
  cert="${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}"
  pipdir="$(mktemp -d /tmp/drl-pip.XXXXXX)"
  trap 'rm -rf "$pipdir"' EXIT
  printf '[global]\n' >"$pipdir/pip.conf"
  if [ -n "$index" ]; then
    printf 'index-url = %s\n' "$index" >>"$pipdir/pip.conf"
  fi
  if [ -n "$links" ] && [ -d "$links" ]; then
    printf 'find-links = /mnt\n' >>"$pipdir/pip.conf"
    args+=(-v "$links:/mnt:ro")
  fi
  if [ -n "$cert" ] && [ -f "$cert" ]; then
    cp "$cert" "$pipdir/ca.crt"
    printf 'cert = /srv/ca.crt\n' >>"$pipdir/pip.conf"
  fi
  chmod -R a+rX "$pipdir"
  args+=(-v "$pipdir:/srv:ro" -v "$pipdir/pip.conf:/etc/pip.conf:ro")
fi
if [ "$file" = docker/Dockerfile ] && ! has_arg TORCH_INDEX_URL \
    && ! reachable https://download.pytorch.org/whl/cpu/; then
  say "download.pytorch.org cannot be reached: torch comes from ${index:-https://pypi.org/simple}" \
    "$([ "$engine" = docker ] && echo '(docker mounts no local wheel: a CUDA build unless that index has CPU ones)')"
  args+=(--build-arg "TORCH_INDEX_URL=${index:-https://pypi.org/simple}")
fi

say "building $tag with $engine"
start=$(date +%s)
"$engine" build "${args[@]}" "${extra[@]+"${extra[@]}"}" "$context"
say "built $tag in $(( $(date +%s) - start )) s"
