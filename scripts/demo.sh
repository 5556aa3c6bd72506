#!/usr/bin/env bash
# The main job on the embedded defaults: set up (idempotent), then run the CuSeT demo pipeline.
# Extra arguments go to `cuset demo` (see `cuset demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/cuset demo "$@"
