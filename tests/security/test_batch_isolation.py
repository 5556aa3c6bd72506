"""The candidates of one batch share a reference run (``ReferencePool``): the same inputs, so a
candidate that could leave something for a later one (its outputs, computed by torch, keyed on
the inputs) would hand it a lookup table. Each test runs a leaving candidate, then a candidate of
the same batch that fails on purpose when it finds what was left; the second must pass. They
run unprivileged, in scripts/test_unprivileged.sh (the way the shipped image runs the verifier).
"""

from __future__ import annotations

import time

import pytest
from attacks import PROBLEM, at_import

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.execution.tier_run import WarmSides
from cuset_core.verify.result import Tier, Verdict
from cuset_core.verify.settings import SandboxLimits, VerifySettings

pytestmark = pytest.mark.slow

SETTINGS = VerifySettings(tier=Tier.CPU, limits=SandboxLimits(wall_s=300, cpu_s=300))
MARK = "cuset-batch-leak-7c1e"
# Everywhere a process in the sandbox might write: its folder's parent, the shared temporary
# folders, its home, and the folders of the toolchain and the package it reads.
PLACES = "['..', '/tmp', '/var/tmp', '/dev/shm', os.path.expanduser('~'), sys.prefix, os.path.dirname(torch.__file__)]"

# Another order and layer: files written at import, before the extension builds.
LEAVE_FILES = f"""
import os, sys
for _place in {PLACES}:
    try:
        with open(os.path.join(_place, "{MARK}"), "w") as _f:
            _f.write("outputs")
    except OSError:
        pass
"""
FIND_FILES = f"""
import os, sys
for _place in {PLACES}:
    if os.path.exists(os.path.join(_place, "{MARK}")):
        raise RuntimeError("left by an earlier candidate: " + _place)
"""
# Another process: a child that outlives the candidate (its own session, out of the candidate's
# process group), named so that a later candidate finds it in /proc. (Sockets are no channel at
# all: the sandbox's seccomp filter refuses to create one.)
LEAVE_PROCESS = f"""
import os
if os.fork() == 0:
    os.setsid()
    os.execvp("sleep", ["{MARK}", "600"])
"""
FIND_PROCESS = f"""
import os
for _pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{{_pid}}/cmdline", "rb") as _f:
            _seen = _f.read()
    except OSError:
        continue
    if b"{MARK}" in _seen:
        raise RuntimeError("a process of an earlier candidate is still running: " + _pid)
"""


@pytest.mark.parametrize(
    ("leave", "find", "warm"),
    [(LEAVE_FILES, FIND_FILES, False), (LEAVE_PROCESS, FIND_PROCESS, False), (LEAVE_PROCESS, FIND_PROCESS, True)],
    ids=["files", "a process that outlives it", "a process that outlives it, next side started ahead"],
)
def test_a_candidate_leaves_nothing_for_the_next_candidate_of_its_batch(leave, find, warm):
    # With warm sides, the second candidate runs in a side the pool started right after the first
    # ended, while anything the first left behind would still be there. (A side's files are in a
    # tmpfs of its own whenever it starts, so files need no second case.)
    batch = ReferencePool()
    with WarmSides() as sides:
        held = sides if warm else None
        first = run_cpu_tier(PROBLEM, parse_candidate(at_import(leave)), SETTINGS, references=batch, warm=held)
        if warm:
            deadline = time.monotonic() + 30
            while len(sides.waiting()) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        second = run_cpu_tier(PROBLEM, parse_candidate(at_import(find)), SETTINGS, references=batch, warm=held)
        assert sides.taken == (1 if warm else 0)
    assert first.verdict is Verdict.PASS, (first.reason, first.log[-2000:])
    assert batch.runs == 1  # the two were judged on the same inputs
    assert second.verdict is Verdict.PASS, (second.reason, second.log[-2000:])
