"""The sandbox's cgroups (v1): one for processes and one for memory per run, where the verifier
may make them (root), capping all of the command's processes together; what they counted, and
their removal (a dead verifier's included)."""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from cuset_core.verify.settings import SandboxLimits

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_CGROUP_PREFIX = "cuset-sandbox-"


@dataclass(frozen=True)
class _Cgroups:
    """The sandbox's own cgroups (v1), None where one could not be made."""

    pids: Path | None
    memory: Path | None

    def folders(self) -> list[Path]:
        return [g for g in (self.pids, self.memory) if g is not None]


def _own_cgroup(controller: str) -> Path | None:
    """This process's cgroup folder for ``controller`` (v1 hierarchy), if mounted here."""
    root = _CGROUP_ROOT / controller
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                return root / path.lstrip("/")
    except (OSError, ValueError):
        return None
    return None


def _make_cgroup(controller: str, settings: dict[str, int]) -> Path | None:
    """A fresh cgroup named after this process, under this process's own; None if impossible."""
    parent = _own_cgroup(controller)
    if os.geteuid() != 0 or parent is None or not os.access(parent, os.W_OK):
        return None
    _remove_orphans(parent)
    group = parent / f"{_CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex}"
    try:
        group.mkdir()
    except OSError:
        return None
    try:
        for name, value in settings.items():
            (group / name).write_text(str(value))
    except OSError:
        _release(group)
        return None
    return group


def _remove_orphans(parent: Path) -> None:
    """Remove sandbox cgroups whose verifier died before it could (its PID is in the name)."""
    for group in parent.glob(f"{_CGROUP_PREFIX}*"):
        try:
            os.kill(int(group.name[len(_CGROUP_PREFIX) :].split("-")[0]), 0)
        except ProcessLookupError:
            _release(group)
        except (ValueError, PermissionError):
            continue


def _make_cgroups(limits: SandboxLimits) -> _Cgroups:
    memory = limits.memory_mb * 1024 * 1024
    return _Cgroups(
        pids=_make_cgroup("pids", {"pids.max": limits.max_processes}),
        memory=_make_cgroup("memory", {"memory.limit_in_bytes": memory}),
    )


def _release(group: Path) -> None:
    """Kill whatever is left in ``group`` and remove it."""
    for _ in range(100):
        try:
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except OSError:
            break
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    try:
        group.rmdir()
    except OSError:
        pass


def _counter(path: Path, key: str) -> int:
    """The value of ``key`` in a cgroup ``key value`` file, 0 when absent."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _release_cgroups(groups: _Cgroups) -> tuple[bool, bool]:
    """Remove the cgroups; whether a fork was refused, whether the OOM killer struck."""
    forks_refused = groups.pids is not None and _counter(groups.pids / "pids.events", "max") > 0
    oom_killed = groups.memory is not None and _counter(groups.memory / "memory.oom_control", "oom_kill") > 0
    for group in groups.folders():
        _release(group)
    return forks_refused, oom_killed


def _user_tasks(uid: int) -> int:
    """Processes and threads ``uid`` holds now (what RLIMIT_NPROC counts)."""
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                count += len(os.listdir(entry / "task"))
        except OSError:
            continue
    return count
