#!/usr/bin/env bash
# Run the test suite. Set-up runs first but installs only what is missing (scripts/setup.sh is
# a no-op when the dependency files are unchanged), then the services the tests use are started
# if they are stopped. `--fast` is the fast lane (no integration, browser or slow tests: a few
# minutes); other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
args=()
for arg in "$@"; do
    if [ "$arg" = --fast ]; then args+=(-m "not integration and not browser and not slow"); else args+=("$arg"); fi
done
case " ${args[*]-} " in
    *"not integration and not browser"*) ;;
    *) bash scripts/test_services.sh ;;
esac
exec .venv/bin/python -m pytest ${args[@]+"${args[@]}"}
