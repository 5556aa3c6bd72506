"""The command line of a training subprocess: plain ``python -m cuset_core.training JOB.json``,
or the same module under a launcher (``accelerate launch [--config_file FILE]``, ``torchrun``)
for several GPUs. Accelerate config files (DDP, FSDP, DeepSpeed; examples in
``configs/accelerate/``) pass through untouched: the Trainer takes its distributed set-up from
the launcher's environment.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from cuset_core.verify.sandbox import session_niceness

MODULE = "cuset_core.training"


class LauncherError(ValueError):
    """The configured launcher cannot start a training run; the message says why."""


def training_command(launcher: Sequence[str], config_path: Path, python: str = sys.executable) -> list[str]:
    """argv of a training run of the job config at ``config_path``; an empty ``launcher`` runs
    ``python`` itself. Raises LauncherError for an accelerate config file that is missing or
    not an accelerate config, before any process starts."""
    if not launcher:
        return [python, "-m", MODULE, str(config_path)]
    check_launcher(launcher)
    return [*launcher, "-m", MODULE, str(config_path)]


def check_launcher(launcher: Sequence[str]) -> None:
    """Reject an ``accelerate`` launcher without ``launch`` or with an unusable
    ``--config_file`` (relative paths are relative to the worker's working directory)."""
    if Path(launcher[0]).name != "accelerate":
        return
    if len(launcher) < 2 or launcher[1] != "launch":
        raise LauncherError(f"training launcher: expected 'accelerate launch ...', got {' '.join(launcher)!r}")
    config_file = _option(launcher, "--config_file")
    if config_file is None:
        return
    if not Path(config_file).is_file():
        raise LauncherError(f"training launcher: accelerate config file not found: {config_file}")
    from accelerate.commands.config.config_args import load_config_from_file

    try:
        load_config_from_file(config_file)
    except Exception as exc:  # noqa: BLE001 - yaml, key and value errors all mean "not a config"
        raise LauncherError(f"training launcher: {config_file} is not an accelerate config: {exc}") from None


def _option(argv: Sequence[str], name: str) -> str | None:
    """The value of ``name VALUE`` or ``name=VALUE`` in ``argv``, if present."""
    for index, arg in enumerate(argv):
        if arg == name and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def follow_session_priority(pid: int) -> None:
    """Give the new session of child ``pid`` this session's scheduling-group niceness.

    With autogroups (Linux's default), niceness ranks a process only inside its own session, and
    the CPU is shared between sessions by each group's niceness. A child started in a session of
    its own (``start_new_session``) was therefore scheduled at full weight, its ``nice 19``
    notwithstanding: a background run that yields its own group (``echo 19 >
    /proc/self/autogroup``) took half the cores from the CI beside it while it trained. Never
    raises a priority; without CAP_SYS_ADMIN the kernel takes one change per 100 ms, hence the
    tries."""
    nice = session_niceness()
    if nice <= 0:
        return  # no autogroups here, or nothing to follow
    for _ in range(5):
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/autogroup").write_text(str(nice))
            return
        time.sleep(0.05)
