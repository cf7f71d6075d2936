#!/usr/bin/env bash
# Builds the two peer environments of the Atari benchmarks, outside the repository (never committed):
#   $PEERS/sf   sample-factory 2.1.1 (numpy<2, gymnasium 0.29) + ale-py 0.12.1 + opencv, for bench.atari_throughput
#   $PEERS/sb3  stable-baselines3 + torch 2.13.0 (CPU wheel) + ale-py, for bench.atari_learner
# Idempotent: an environment whose packages already import is left as it is. PEERS defaults to /work/venvs;
# PYTHON (default python3.11) is the interpreter the environments are made from.
set -euo pipefail
PEERS="${PEERS:-/work/venvs}"
PYTHON="${PYTHON:-python3.11}"
mkdir -p "$PEERS"

make_venv() {  # name, import check, pip arguments...
    local name="$1" check="$2"; shift 2
    local venv="$PEERS/$name"
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
        echo "$venv: ready"
        return
    fi
    [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet "$@"
    "$venv/bin/python" -c "$check"
    echo "$venv: installed"
}

make_venv sf "import sample_factory, ale_py, cv2, torch" \
    "sample-factory==2.1.1" "torch==2.13.0" "ale-py==0.12.1" "opencv-python-headless" "numpy<2"
make_venv sb3 "import stable_baselines3, ale_py, torch; assert torch.__version__.startswith('2.13.0')" \
    "stable-baselines3" "torch==2.13.0" "ale-py==0.12.1" "opencv-python-headless"
"$PEERS/sf/bin/python" -c "import sample_factory, gymnasium, numpy, torch; print('sf:', 'gymnasium', gymnasium.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__)"
"$PEERS/sb3/bin/python" -c "import stable_baselines3, gymnasium, numpy, torch; print('sb3:', 'stable-baselines3', stable_baselines3.__version__, 'gymnasium', gymnasium.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__)"
