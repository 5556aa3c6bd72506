"""Training subprocesses run at the configured niceness or more (``train_nice``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from worker.tasks.tune import _lower_priority


@contextmanager
def child() -> Iterator[subprocess.Popen]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def niceness(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


def test_a_training_process_is_lowered_to_the_configured_niceness():
    target = min(19, niceness(0) + 5)
    with child() as process:
        _lower_priority(process.pid, target)
        assert niceness(process.pid) == target


def test_a_process_already_niced_further_keeps_its_priority():
    with child() as process:
        os.setpriority(os.PRIO_PROCESS, process.pid, 19)
        _lower_priority(process.pid, 10)
        assert niceness(process.pid) == 19


def test_a_process_that_already_exited_is_left_alone():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    _lower_priority(process.pid, 10)  # reaped: nothing to lower, and no error


def test_a_training_run_in_a_session_of_its_own_keeps_its_parents_low_priority(tmp_path):
    # With autogroups, niceness ranks a process only inside its session: a child started in a new
    # session (as `cuset tune` starts its training process) ran at full weight beside CI although
    # its parent's whole session was at 19.
    if not Path("/proc/self/autogroup").is_file():
        pytest.skip("this kernel has no autogroups")
    parent = (
        "import pathlib, subprocess, sys, time\n"
        "from cuset_core.training.launch import follow_session_priority\n"
        "pathlib.Path('/proc/self/autogroup').write_text('19')\n"
        "time.sleep(0.15)  # the kernel takes one change per 100 ms without CAP_SYS_ADMIN\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], start_new_session=True)\n"
        "try:\n"
        "    follow_session_priority(child.pid)\n"
        "    print(pathlib.Path(f'/proc/{child.pid}/autogroup').read_text().split()[-1])\n"
        "finally:\n"
        "    child.kill()\n"
    )
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, start_new_session=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["19"]
