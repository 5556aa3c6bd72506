#!/usr/bin/env bash
# Run the test suite. Set-up runs first but installs only what is missing (scripts/setup.sh is
# a no-op when the dependency files are unchanged), then the services the tests use are started
# if they are stopped.
#
# With no arguments, the full suite in lanes, each timed ("lane NAME: N s"), every lane run even
# when an earlier one fails:
#   parallel      everything that needs no service (unit, security, slow) on every core (pytest-xdist)
#   services      integration and browser tests (tests/integration, tests/browser, whose conftests
#                 mark them; the parallel lane does not collect them) on up to 4 processes (pytest-xdist): each process has
#                 a service of its own (a fresh Postgres database, Redis key prefix, Celery workers
#                 and API server); the fault tests stop and restart private servers of their own
#   unprivileged  (when run as root, beside the services lane) the sandbox and security tests as an
#                 unprivileged user, the way the shipped image runs the verifier
#                 (scripts/test_unprivileged.sh); the forged-verdict suite, the attack variations, the
#                 second-size attack, the batch-isolation, the device-boundary and the data-flow policy
#                 suites run there only:
#                 they test the verifier behind its sandbox, not the sandbox (whose own suites run in
#                 both lanes, root's sandbox and the user namespace's), and as root they would repeat
#   newest-python (beside the services lane, after unprivileged) the demo's verification path on the
#                 newest Python the machine has, in its own environment (scripts/test_newest_python.sh),
#                 set up at nice 19 from the parallel lane on
# `--fast` is the parallel lane without slow tests (a few minutes, no services needed). Other
# arguments make one pytest run with them: `bash scripts/test.sh -x tests/unit/test_data_load.py`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# pytest keeps each test module's rewritten bytecode only where bytecode may be written: with
# PYTHONDONTWRITEBYTECODE set, every pytest process of every lane rewrote all of them again
# (4-6 CPU-s a process). The caches live in the checkout's ignored __pycache__ folders.
unset PYTHONDONTWRITEBYTECODE

# One folder of precompiled tier-2 preludes for every lane and user, built once here (about 1.5 min
# the first time) instead of once per lane.
export CUSET_CPU_PCH_DIR=${CUSET_CPU_PCH_DIR:-$PWD/.cache/cpu_pch}
prepare_preludes() {
    .venv/bin/python -c 'from cuset_core.verify.cpu.build import prepare_preludes; prepare_preludes()' \
        || echo "warning: the tier-2 preludes did not build; tier-2 tests will say why" >&2
}

pytest=(.venv/bin/python -m pytest)
durations=(--durations=20)  # each lane names its slowest tests, so CI shows where its time goes
parallel=(-n auto)

if [ "$#" -gt 0 ]; then
    args=()
    for arg in "$@"; do
        if [ "$arg" = --fast ]; then args+=(-m "not integration and not browser and not slow" "${parallel[@]}"); else args+=("$arg"); fi
    done
    case " ${args[*]} " in
        *"not integration and not browser"*) ;;
        *) bash scripts/test_services.sh ;;
    esac
    prepare_preludes
    exec "${pytest[@]}" "${args[@]}"
fi

bash scripts/test_services.sh
status=0
failed=()
cpu_ticks() {  # the machine's busy and total CPU time so far, in clock ticks (/proc/stat)
    local _ user nice system idle iowait rest
    read -r _ user nice system idle iowait rest </proc/stat
    echo "$((user + nice + system)) $((user + nice + system + idle + iowait))"
}
lane_group() {  # lane_group NAME: a cpuacct cgroup of the lane's own, where the machine lets one be made
    local group=/sys/fs/cgroup/cpuacct/cuset-lane-$1-$$
    mkdir -p "$group" 2>/dev/null && [ -w "$group/tasks" ] && echo "$group"
}
lane() {  # lane NAME COMMAND...: run and time one lane; remember it when it fails
    local started=$SECONDS code=0 before after group spent=""
    before=$(cpu_ticks)
    group=$(lane_group "$1") || group=""
    echo "lane $1: started"
    # In its cgroup every process of the lane counts, however it was started (sandboxes that leave
    # their parents, servers, pytest-xdist's workers), and nothing beside it does.
    if [ -n "$group" ]; then (echo "$BASHPID" >"$group/tasks" && "${@:2}") || code=$?; else "${@:2}" || code=$?; fi
    after=$(cpu_ticks)
    if [ -n "$group" ]; then
        spent="CPU $(($(cat "$group/cpuacct.usage") / 1000000000)) s, "
        rmdir "$group" 2>/dev/null || true
    fi
    # How busy the whole machine's cores were meanwhile (a lane far below 100 % leaves room beside
    # it), and the CPU the lane's own processes spent (of lanes run side by side, which to cut).
    echo "lane $1: $((SECONDS - started)) s, exit $code, ${spent}cores busy $(( (${after% *} - ${before% *}) * 100 / (${after#* } - ${before#* } + 1) )) %"
    if [ "$code" != 0 ]; then status=$code; failed+=("$1"); fi
}
lane preludes prepare_preludes
# The newest-Python lane's set-up (a virtual environment and its own preludes, about 150 CPU-s) at
# the lowest priority from now on: it takes what the parallel lane leaves idle (its last tests run
# on fewer workers than cores) instead of competing with the services lane later. A session of its
# own at autogroup niceness 19: plain nice works only within an autogroup, and the tests' own
# session idles while they wait on sandboxes (sessions of their own), so a nice-19 job in it took
# that share at full speed.
mkdir -p .cache
rm -f .cache/newest-python-prepare.exit
(started=$SECONDS code=0
 setsid -w bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 bash scripts/test_newest_python.sh --prepare' \
     >.cache/newest-python-prepare.log 2>&1 || code=$?
 echo "newest-python set-up (nice 19, from the parallel lane on): $((SECONDS - started)) s, exit $code" >>.cache/newest-python-prepare.log
 echo "$code" >.cache/newest-python-prepare.exit) &
unprivileged=()
if [ "$(id -u)" = 0 ]; then
    unprivileged=(--ignore tests/security/test_forged_verdicts.py --ignore tests/security/test_attack_variations.py
        --ignore tests/security/test_batch_isolation.py --ignore tests/security/test_device_boundary.py
        --ignore tests/security/test_data_flow_policy.py
        --deselect tests/security/test_judge_blame.py::test_a_kernel_right_only_at_the_reduced_size_fails_at_a_second_size)
fi
lane parallel "${pytest[@]}" "${parallel[@]}" "${durations[@]}" -m "not integration and not browser" \
    --ignore tests/integration --ignore tests/browser ${unprivileged[@]+"${unprivileged[@]}"}
# The unprivileged lane, then the newest-Python lane, run beside the services lane, whose tests
# spend much of their time waiting on workers and servers; their output is shown once all are done.
(status=0  # this subshell's own lanes; the parent's failures are the parent's to report
 if [ "$(id -u)" = 0 ]; then lane unprivileged bash scripts/test_unprivileged.sh >.cache/unprivileged.log 2>&1; fi
 # Its set-up may still be running (at nice 19, in the parent shell): the lane waits for it.
 until [ -f .cache/newest-python-prepare.exit ]; do sleep 1; done
 code=$(cat .cache/newest-python-prepare.exit)
 if [ "$code" != 0 ]; then cat .cache/newest-python-prepare.log; else tail -n 1 .cache/newest-python-prepare.log; fi >.cache/newest-python.log
 lane newest-python bash scripts/test_newest_python.sh >>.cache/newest-python.log 2>&1
 exit "$status") &
beside=$!
lane services "${pytest[@]}" -n auto --maxprocesses 4 "${durations[@]}" -m "integration or browser" tests/integration tests/browser
code=0
wait "$beside" || code=$?
for log in unprivileged newest-python; do
    if [ -f ".cache/$log.log" ]; then echo "lane $log (run beside services):"; cat ".cache/$log.log"; fi
done
if [ "$code" != 0 ]; then status=$code; failed+=("unprivileged or newest-python"); fi
if [ "$status" != 0 ]; then
    joined=$(printf ', %s' "${failed[@]}")
    echo "test: failed lanes: ${joined:2}" >&2
fi
exit "$status"
