#!/usr/bin/env bash
# Issue 12's GPU check, one command within the device tool's limits (under 8 minutes on one
# H200): a bf16 LoRA and a QLoRA CuSeT run, generation with both adapters on one cached base,
# and tier-3 (GPU) verification of the demo solutions. Figures go to $OUT (or runs/gpu_check).
#
#   bash scripts/gpu_check.sh prepare     # here, with the venv and network: tokenizer + wheels
#                                         # into .gpu_check/ (git-ignored; carry it to the GPU)
#   bash scripts/gpu_check.sh --dry-run   # the same steps at toy sizes on a CPU (no QLoRA)
#   bash scripts/gpu_check.sh             # on the GPU machine: installs .gpu_check/wheels
#                                         # offline (never from the internet), then runs
#
# The GPU machine has torch/transformers/peft already; what it lacks travels as wheels built
# for Python 3.12 (the device README's recipe). Device tool: run with carry [".gpu_check"].
set -euo pipefail
cd "$(dirname "$0")/.."
ASSETS=.gpu_check
# The packages cuset_core needs beyond the GPU machine's image; bitsandbytes is QLoRA's.
WHEELS="pydantic==2.14.4 pydantic-core annotated-types typing-inspection tree-sitter==0.26.1
tree-sitter-cuda==0.21.2 bitsandbytes"

if [ "${1:-}" = prepare ]; then
  PY=.venv/bin/python
  mkdir -p "$ASSETS/wheels"
  "$PY" - "$ASSETS/tokenizer" <<'PYEOF'
import sys
from cuset_core.models import BUNDLED_MODEL, load_tokenizer
load_tokenizer(BUNDLED_MODEL).save_pretrained(sys.argv[1])
PYEOF
  # pydantic-core must be the version this pydantic was built against: the one installed here.
  core=$("$PY" -c "import pydantic_core; print(pydantic_core.__version__)")
  for wheel in $WHEELS; do
    [ "$wheel" = pydantic-core ] && wheel="pydantic-core==$core"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d "$ASSETS/wheels" "$wheel"
  done
  du -sh "$ASSETS"
  exit 0
fi

OUT_DIR="${OUT:-runs/gpu_check}"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
if [ "${1:-}" = --dry-run ]; then
  PY=${PY:-.venv/bin/python}
  "$PY" scripts/gpu_check.py --dry-run --out "$OUT_DIR" --work "$WORK" --assets "$ASSETS"
  exit
fi
PY=${PY:-python3}
if compgen -G "$ASSETS/wheels/*.whl" >/dev/null; then
  # Offline: only the carried wheels, into a folder of their own (the image's packages stay as they are).
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "$ASSETS"/wheels/*.whl
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
# This check verifies the project's own demo solutions on a single-user machine: no hostile code.
export CUSET_SANDBOX_ALLOW_UNISOLATED=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" scripts/gpu_check.py --out "$OUT_DIR" --work "$WORK" --assets "$ASSETS"
