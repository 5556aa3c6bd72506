#!/usr/bin/env bash
# The static gates CI runs before the tests: ruff lint, ruff format check and mypy (configured in
# pyproject.toml). Every gate runs even when an earlier one fails; the exit status is non-zero
# when any failed, and the last line names the failed gates. Run scripts/setup.sh first.
set -uo pipefail
cd "$(dirname "$0")/.."
failed=()
gate() {  # gate NAME COMMAND...: run one gate, remember it when it fails
    echo "lint: $1"
    "${@:2}" || failed+=("$1")
}
gate "ruff check" .venv/bin/ruff check .
gate "ruff format" .venv/bin/ruff format --check .
gate "mypy" .venv/bin/mypy
if [ "${#failed[@]}" -gt 0 ]; then
    joined=$(printf ', %s' "${failed[@]}")
    echo "lint: failed: ${joined:2}" >&2
    exit 1
fi
echo "lint: all gates passed"
