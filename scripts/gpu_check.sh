#!/usr/bin/env bash
# The GPU check, one command within the device tool's limits (under 8 minutes on one H200): a
# bf16 LoRA and a QLoRA CuSeT run, generation with both adapters on one cached base, tier-3 (GPU)
# verification of the demo solutions, tier 3 alone on every attack class of tests/security, and
# a level-1 eval at tier gpu over the labelled Sakana kernels. Figures go to $OUT (or
# runs/gpu_check).
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
# The packages cuset_core needs beyond the GPU machine's image (pydantic-settings: the verifier's
# settings); bitsandbytes is QLoRA's.
WHEELS="pydantic==2.14.4 pydantic-core annotated-types typing-inspection pydantic-settings==2.16.3 python-dotenv==1.2.4 tree-sitter==0.26.1
tree-sitter-cuda==0.21.2 bitsandbytes"

if [ "${1:-}" = prepare ]; then
  PY=.venv/bin/python
  mkdir -p "$ASSETS/wheels"
  "$PY" - "$ASSETS/tokenizer" <<'PYEOF'
import sys
from cuset_core.models import BUNDLED_MODEL, load_tokenizer
load_tokenizer(BUNDLED_MODEL).save_pretrained(sys.argv[1])
PYEOF
  # The level-1 eval's kernels: the labelled Sakana rows of level 1 (../shared/data does not
  # travel to the GPU machine; this copy stays in the git-ignored assets folder).
  sakana=../shared/data/sakana_labelled_kernels.jsonl
  if [ -f "$sakana" ]; then
    "$PY" - "$sakana" "$ASSETS/level1.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(line) | {"row": n} for n, line in enumerate(open(sys.argv[1]), start=1)]
keep = ("row", "Task_ID", "Op_Name", "Correct", "PyTorch_Code_Module", "CUDA_Code")
with open(sys.argv[2], "w") as out:
    for row in rows:
        if row["Level_ID"] == 1:
            out.write(json.dumps({key: row[key] for key in keep}) + "\n")
PYEOF
  else
    echo "gpu_check: $sakana not found; the level-1 eval step will be skipped" >&2
  fi
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
  # Offline: only the carried wheels, into the interpreter's own environment (the GPU machine is
  # bare and given back after the check), since the verifier's sandboxed sides start from a clean
  # environment and find only what that interpreter has installed.
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$ASSETS"/wheels/*.whl
fi
# This check verifies the project's own demo solutions on a single-user machine: no hostile code.
export CUSET_SANDBOX_ALLOW_UNISOLATED=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" scripts/gpu_check.py --out "$OUT_DIR" --work "$WORK" --assets "$ASSETS"
