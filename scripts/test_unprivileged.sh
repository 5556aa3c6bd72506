#!/usr/bin/env bash
# The sandbox tests, the forged-verdict suite, the attack variations, the batch-isolation,
# device-boundary, data-flow policy, second-size, vector-alignment and stream-order attacks as an
# unprivileged user, the way the shipped image runs
# the verifier (the sandbox is then a user namespace, not root dropping to its own uid). Only the
# sandbox's own suites also run as root, in scripts/test.sh's parallel lane; the other security
# suites test the judge and the CPU runtime, which do not depend on the uid: they run there only,
# except the vector-alignment and stream-order suites, which run in both lanes (the GPU rules of
# issue 47, item 4, checked as root and unprivileged). Run as root after scripts/setup.sh (scripts/test.sh runs it as its last lane);
# extra arguments go to pytest.
# CUSET_CPU_PCH_DIR, when set, names tier 2's precompiled preludes, built beforehand and read here.
# One test at a time: every sandbox here runs as the same uid, so parallel tests would share its
# process limit (RLIMIT_NPROC) and one test's cap would trip on another's processes.
set -euo pipefail
cd "$(dirname "$0")/.."

USER_NAME=${CUSET_TEST_USER:-cuset-ci}
id -u "$USER_NAME" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$USER_NAME"

# The user must reach the repository, the venv and the Python it links to: grant search (x) on
# every folder above them, and read on what may lack it. Nothing is made writable.
python_real=$(readlink -f .venv/bin/python)
for path in "$PWD" "$(dirname "$python_real")"; do
    while [ "$path" != / ]; do chmod o+x "$path"; path=$(dirname "$path"); done
done
chmod -R o+rX . "$(dirname "$(dirname "$python_real")")" 2>/dev/null || true

home=$(mktemp -d /tmp/cuset-unprivileged-XXXXXX)
chown "$USER_NAME" "$home"
trap 'rm -rf "$home"' EXIT
exec runuser -u "$USER_NAME" -- env -i PATH="$PATH" HOME="$home" PYTHONPATH="${PYTHONPATH:-}" LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 \
    ${CUSET_CPU_PCH_DIR:+CUSET_CPU_PCH_DIR="$CUSET_CPU_PCH_DIR"} \
    .venv/bin/python -m pytest -p no:cacheprovider -q --durations=10 \
    tests/security/test_forged_verdicts.py tests/security/test_sandbox_isolation.py \
    tests/security/test_sandbox_fail_closed.py tests/security/test_batch_isolation.py tests/unit/test_verify_sandbox.py \
    tests/security/test_sandbox_interpreter_links.py \
    tests/security/test_attack_variations.py tests/security/test_device_boundary.py tests/security/test_data_flow_policy.py \
    tests/security/test_inputs_and_sizes.py \
    tests/security/test_misaligned_vectors.py tests/security/test_stream_order.py \
    tests/security/test_judge_blame.py::test_a_kernel_right_only_at_the_reduced_size_fails_at_a_second_size "$@"
