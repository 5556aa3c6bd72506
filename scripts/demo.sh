#!/usr/bin/env bash
# The main job on the embedded defaults: set up (idempotent), then run the CuSeT demo as a
# service: `cuset serve` on a fresh data dir under runs/demo-service, and a client that uploads
# the demo data, tunes SmolLM2-135M briefly, and has the shipped adapter cuset-ew-135m write a
# kernel that the service verifies, over HTTP.
# Extra arguments go to scripts/demo_service.py (see its --help; e.g. --steps 8 --keep-serving).
# The library-only pipeline, without the service, is `.venv/bin/cuset demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Set-up too: the CPU tier's precompiled headers, built once per torch and compiler (1-2 min the
# first time; then a cache hit). Without this the demo's first verification would wait for them.
echo "set-up: the CPU verifier's precompiled headers (built once, 1-2 min the first time)"
.venv/bin/python -c "from cuset_core.verify.cpu.build import prepare_preludes; prepare_preludes()"
exec .venv/bin/python scripts/demo_service.py "$@"
