"""Follow a training subprocess: hand its progress JSONL to the job's ``Recorder``
(service/job_progress.py) as it grows, beat the job's heartbeat, and pass a cancel request on
(CANCEL file + SIGTERM). The caller gets a ``RunReport``.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from cuset_core.training.progress_lines import ProgressLine, parse_line
from db.session import session_scope
from db.settings import Settings
from service.job_progress import Recorder, RunReport
from service.jobs import beat

POLL_S = 0.25  # how often the progress file and the process are looked at


class ProgressFollower:
    """Complete lines appended to a JSONL file since ``offset`` (bytes); a partial last line
    waits for its newline."""

    def __init__(self, path: Path, offset: int = 0):
        self.path, self.offset = path, offset

    def read(self) -> list[ProgressLine]:
        if not self.path.is_file():
            return []
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        # A torn line (the writer was killed mid-write) carries nothing usable.
        return [line for raw in chunk[:end].splitlines() if (line := parse_line(raw)) is not None]


def stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM (the run saves a checkpoint and exits), then SIGKILL after ``grace_s`` seconds."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def supervise(
    process: subprocess.Popen,
    follower: ProgressFollower,
    settings: Settings,
    job_id: str,
    attempt: int,
    cancel_file: Path,
) -> RunReport:
    """Follow ``process`` until it exits (or the job is taken from this attempt); never raises
    with the process still running."""
    report = RunReport()
    recorder = Recorder(settings, job_id, attempt)
    url = settings.resolved_database_url
    last_beat = 0.0
    deadline = time.monotonic() + settings.job_max_wall_s
    stop_by: float | None = None  # when a run asked to stop is stopped where it is
    try:
        while True:
            exited = process.poll() is not None
            lines = follower.read()
            if lines:
                with session_scope(url) as session:
                    recorder.record(session, lines, report)
            if exited:
                break
            if stop_by is not None and time.monotonic() >= stop_by:
                break  # its step did not end in time: stopped below, its last checkpoint kept
            if time.monotonic() - last_beat >= settings.heartbeat_interval_s:
                last_beat = time.monotonic()
                with session_scope(url) as session:
                    owned, cancel = beat(session, job_id, attempt)
                if not owned:
                    report.lost = True
                    stop(process)
                    break
                overdue = time.monotonic() >= deadline
                if (cancel or overdue) and not report.cancel_sent:
                    # The same clean stop either way: the trainer saves a checkpoint and exits.
                    cancel_file.parent.mkdir(parents=True, exist_ok=True)
                    cancel_file.touch()
                    process.send_signal(signal.SIGTERM)
                    report.cancel_sent = True
                    stop_by = time.monotonic() + settings.cancel_grace_s
                    report.wall_clock_hit = overdue and not cancel
            time.sleep(POLL_S)
    finally:
        stop(process, grace_s=0 if stop_by is not None else 30.0)
    if not report.lost and (lines := follower.read()):  # what it wrote in its last moments
        with session_scope(url) as session:
            recorder.record(session, lines, report)
    report.returncode = process.returncode
    return report
