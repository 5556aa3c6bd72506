#!/usr/bin/env bash
# The main job on the embedded defaults: set up (idempotent), then run the CuSeT demo as a
# service: `cuset serve` on a fresh data dir under runs/demo-service, and a client that uploads
# the demo data, tunes SmolLM2-135M, and generates and verifies a kernel over HTTP.
# Extra arguments go to scripts/demo_service.py (see its --help; e.g. --steps 8 --keep-serving).
# The library-only pipeline, without the service, is `.venv/bin/cuset demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/demo_service.py "$@"
