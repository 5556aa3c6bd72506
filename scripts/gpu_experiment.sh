#!/usr/bin/env bash
# The issue-6 comparison on one GPU (an H200) within 8 minutes: every objective, two seeds,
# one epoch over the whole train split, batch 16, bf16, full fine-tuning, 8 runs sharing the
# GPU at once; eval answers generated on the GPU and verified up to tier cpu. Writes
# experiments/comparison/full/ and docs/results/full_tables.md (+ plots), the same format as
# the CPU comparison. Rerunning skips finished stages.
#
#   bash scripts/gpu_experiment.sh              # size full (needs a CUDA GPU to be quick)
#   SIZE=tiny bash scripts/gpu_experiment.sh    # plumbing check on a CPU (random tiny model)
#
# BUDGET_S (default 480) stops the runner there; a later call resumes what is unfinished.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE="${SIZE:-full}"
BUDGET_S="${BUDGET_S:-480}"
PY=.venv/bin/python
[ -x "$PY" ] || bash scripts/setup.sh
if [ "$SIZE" = full ]; then
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU: use SIZE=tiny on a CPU')"
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
fi
start=$(date +%s)
# --kill-after: a training process gets SIGTERM first (it checkpoints), then SIGKILL.
timeout --kill-after=30 "$BUDGET_S" "$PY" scripts/run_comparison.py --size "$SIZE" || echo "runner stopped (exit $?); rerun to resume"
echo "runner: $(( $(date +%s) - start )) s"
if [ "$SIZE" = tiny ]; then
  "$PY" scripts/results_report.py --size tiny --experiments runs/comparison --out runs/comparison/tiny/report
else
  "$PY" scripts/results_report.py --size "$SIZE"
fi
