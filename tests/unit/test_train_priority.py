"""Training subprocesses run at the configured niceness or more (``train_nice``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

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
