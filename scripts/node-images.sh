#!/usr/bin/env bash
# Images for scripts/local-cluster.sh's real node, which pulls nothing from a registry:
#
#   drl.local/pause:1     the sandbox ("pause") image containerd starts for every pod (docker/node/pause.c)
#   drl.local/testbox:1   a static program for tests: echo, fail, sleep, an HTTP server, an HTTP client that
#                         resolves names through the pod's DNS (docker/node/testbox.c; its usage is at its top)
#
# Both are one layer with one static binary (gcc -static), written as docker-archive tarballs from fixed
# timestamps and owners, so the same sources give the same image ids. The project's own images come from podman.
#
#   bash scripts/node-images.sh write DIR                 write DIR/pause.tar and DIR/testbox.tar
#   bash scripts/node-images.sh import SOCKET             write both and import them into the containerd at SOCKET
#                                                         (namespace k8s.io, the one the kubelet sees)
#   bash scripts/node-images.sh podman SOCKET IMAGE...    `podman save IMAGE | ctr import` each IMAGE, only where
#                                                         the containerd copy is not that podman image id already
#
# local-cluster.sh runs `import` at `up`; `local-cluster.sh image IMAGE... [--name NAME]` runs `podman` for a
# running cluster. Needs gcc with the static C library (Debian's libc6-dev), tar, sha256sum and ctr (containerd).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PAUSE_IMAGE=drl.local/pause:1
TESTBOX_IMAGE=drl.local/testbox:1
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

# image_archive OUT REF ENTRYPOINT_JSON ROOTFS: a docker-archive of one layer (the folder ROOTFS) at OUT.
image_archive() {
  local out="$1" ref="$2" entrypoint="$3" rootfs="$4" work diff config
  work="$(mktemp -d)"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$rootfs" -cf "$work/layer.tar" .
  diff="$(sha "$work/layer.tar")"
  mkdir "$work/$diff"
  mv "$work/layer.tar" "$work/$diff/layer.tar"
  printf '{"architecture":"%s","os":"linux","created":"1970-01-01T00:00:00Z","config":{"Entrypoint":%s,"Env":["PATH=/"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"scripts/node-images.sh"}]}' \
    "$(arch)" "$entrypoint" "$diff" > "$work/config.json"
  config="$(sha "$work/config.json")"
  mv "$work/config.json" "$work/$config.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$config" "$ref" "$diff" \
    > "$work/manifest.json"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work" -cf "$out" \
    manifest.json "$config.json" "$diff"
  rm -rf "$work"
}

# static_image OUT REF SOURCE BINARY: compiles SOURCE statically to /BINARY, the image's only file and entrypoint.
static_image() {
  local out="$1" ref="$2" src="$3" bin="$4" rootfs
  rootfs="$(mktemp -d)"
  chmod 755 "$rootfs"
  # getaddrinfo in a static glibc binary: the link warns that NSS modules would be loaded at run time; glibc 2.34
  # and newer have files and dns built in, which is all the test image uses.
  gcc -static -Os -s -Wall -o "$rootfs/$bin" "$src" 2> >(grep -v -e 'getaddrinfo' -e 'in function' >&2) \
    || die "gcc -static failed for $src (Debian: apt-get install gcc libc6-dev)"
  image_archive "$out" "$ref" "[\"/$bin\"]" "$rootfs"
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

# podman IMAGE...: imports each podman image whose id differs from the one recorded on the containerd copy.
podman_() {
  local image id ref had
  command -v podman >/dev/null 2>&1 || die "podman is not installed"
  for image in "$@"; do
    id="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null)" || die "podman has no image $image"
    ref="$(podman image inspect --format '{{index .RepoTags 0}}' "$image" 2>/dev/null || true)"
    [ -n "$ref" ] && [ "$ref" != "<no value>" ] || ref="$image"
    had="$(ctr_ images ls "name==$ref" 2>/dev/null | awk 'NR > 1 {print $NF}')"
    if grep -q "$PODMAN_ID_LABEL=$id" <<<"$had"; then
      say "$ref: already imported (podman id ${id:0:12})"
      continue
    fi
    local t0=$SECONDS
    podman save --format docker-archive "$image" | ctr_ images import --platform "linux/$(arch)" - >/dev/null
    ctr_ images label "$ref" "$PODMAN_ID_LABEL=$id" >/dev/null
    say "$ref: imported in $((SECONDS - t0)) s (podman id ${id:0:12})"
  done
}

case "${1:-}" in
  write) [ $# = 2 ] || die "usage: $0 write DIR"; write "$2" ;;
  import) [ $# = 2 ] || die "usage: $0 import SOCKET"; SOCKET="$2"; import ;;
  podman) [ $# -ge 3 ] || die "usage: $0 podman SOCKET IMAGE..."; SOCKET="$2"; shift 2; podman_ "$@" ;;
  *) echo "usage: $0 write DIR | import SOCKET | podman SOCKET IMAGE..." >&2; exit 2 ;;
esac
