#!/usr/bin/env bash
# Builds the peer environment of the APPO benchmark, outside the repository (never committed):
#   $PEERS/rllib   ray[rllib] + torch 2.13.0 (CPU wheel) + gymnasium[box2d], for bench.appo_time_to_score
# ray[rllib] pins gymnasium 1.2.2, whose box2d extra is box2d-py: a source package whose build runs the swig
# command, so swig (PyPI's wheel, which ships the binary) is installed first and its binary and library are put
# on PATH and SWIG_LIB (its bin/swig launcher is a Python script that pip's isolated build cannot import).
# torch is pinned in the same pip call as ray, so that ray's requirements cannot move it: both sides of the
# benchmark then train with the same torch. Idempotent: an environment whose packages already import (with that
# torch) is left as it is. PEERS defaults to /work/venvs; PYTHON (default python3.11) is the interpreter the
# environment is made from.
set -euo pipefail
PEERS="${PEERS:-/work/venvs}"
PYTHON="${PYTHON:-python3.11}"
VENV="$PEERS/rllib"
CHECK="import ray, ray.rllib, torch, gymnasium, Box2D; assert torch.__version__.startswith('2.13.0'), torch.__version__"
mkdir -p "$PEERS"

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "$CHECK" >/dev/null 2>&1; then
    echo "$VENV: ready"
else
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip swig
    SWIG_BIN="$("$VENV/bin/python" -c 'import swig; print(swig.BIN_DIR)')"
    SWIG_LIB="$("$VENV/bin/python" -c 'import swig; print(swig.SWIG_LIB_ENV["SWIG_LIB"])')"
    PATH="$SWIG_BIN:$PATH" SWIG_LIB="$SWIG_LIB" \
        "$VENV/bin/python" -m pip install --quiet "torch==2.13.0" "ray[rllib]" "gymnasium[box2d]"
    "$VENV/bin/python" -c "$CHECK"
    echo "$VENV: installed"
fi
"$VENV/bin/python" -c "import ray, gymnasium, numpy, torch; print('rllib:', 'ray', ray.__version__, 'gymnasium', gymnasium.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__)"
