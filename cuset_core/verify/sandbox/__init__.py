"""Run untrusted candidate code (compilers, extensions, kernels) in a contained child process.

Isolation is bubblewrap (``bwrap``) plus a seccomp filter built with libseccomp (``pyseccomp``);
``isolation`` in the outcome lists what held. With isolation, each run gets:

- ``pid_ns``: its own PID namespace: when the command ends, every process it started dies.
- ``net_ns``: its own network namespace (no interface but a downed loopback) and, by seccomp,
  no ``socket()`` of any family: no TCP, no Unix sockets, no netlink. ``ipc_ns``, ``uts_ns`` too.
- ``min_root``: a minimal read-only root: ``/usr``, a few files of ``/etc``, the Python
  installation and venv, ``cuset_core``, the CUDA toolkit and the CPU tier's precompiled
  preludes; a fresh ``/proc`` and a ``/dev`` of harmless nodes (plus the GPU's). Nothing of
  ``/run``, ``/home``, ``/root``, ``/tmp`` (other jobs' folders) or ``/etc/shadow``.
- ``capped_workdir``: the work folder is a tmpfs of ``limits.workdir_mb``; the caller's files
  are copied in before the command and what the command left is copied back after it, under
  the same cap, regular files and folders only (links and devices are dropped).
- ``non_root``: the command runs as a non-zero uid with no capabilities and ``no_new_privs``
  (``SandboxSettings.uid`` when the verifier is root; its own uid inside a user namespace
  otherwise).
- ``seccomp``: namespace creation (``unshare``, ``setns``, ``clone``/``clone3`` with namespace
  flags), mounts, ``ptrace``, ``bpf``, keyrings, ``userfaultfd``, ``io_uring``,
  ``perf_event_open`` and sockets fail with EPERM.
- ``pids_cgroup``/``memory_cgroup``: processes and memory (tmpfs included) capped across all of
  the command's processes, where the verifier may create cgroups (root).
- Always: a new session killed as a whole at the end, rlimits on CPU time, address space, file
  size and core dumps, cwd/HOME/TMPDIR in the work folder, an environment built from scratch,
  bounded output.

Fail closed: where isolation cannot be set up (bwrap or libseccomp missing, no user namespaces
for a non-root verifier), :func:`run_sandboxed` raises :class:`IsolationUnavailable` unless the
operator opted out with ``CUSET_SANDBOX_ALLOW_UNISOLATED=1``; a set-up step that fails raises
:class:`SandboxSetupError`. Neither ever runs the command.

The package, by role: ``policy`` (what the sandbox may see and has: namespaces, mounts,
environment, as tables), ``seccomp`` (the system calls it may not make), ``cgroups`` (processes
and memory across the command), ``transfer`` (the work folder in and out), ``process`` (running
it and how it ended); here, whether this machine isolates (:func:`isolation`) and the calls that
run a command only then (:func:`run_sandboxed`, :func:`start_sandboxed`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cuset_core.verify.sandbox.cgroups import _Cgroups, _make_cgroups
from cuset_core.verify.sandbox.policy import link_chain, sandbox_env
from cuset_core.verify.sandbox.process import (
    CANCEL_POLL_S,
    OUTPUT_TAIL_BYTES,
    SandboxCancelled,
    SandboxOutcome,
    SandboxSetupError,
    _Running,
    describe,
    session_niceness,
)
from cuset_core.verify.sandbox.seccomp import _seccomp_program, exported_bpf
from cuset_core.verify.sandbox.transfer import _feed, _pack, unpack_files
from cuset_core.verify.settings import SandboxLimits, SandboxSettings

__all__ = [
    "CANCEL_POLL_S",
    "OUTPUT_TAIL_BYTES",
    "REPROBE_FAILURE_S",
    "Isolation",
    "IsolationUnavailable",
    "SandboxCancelled",
    "SandboxOutcome",
    "SandboxSetupError",
    "StartedSandbox",
    "describe",
    "exported_bpf",
    "isolation",
    "link_chain",
    "log_isolation",
    "probe_isolation",
    "refusal",
    "run_sandboxed",
    "sandbox_env",
    "session_niceness",
    "start_sandboxed",
    "unpack_files",
]

log = logging.getLogger(__name__)


class IsolationUnavailable(RuntimeError):
    """The sandbox cannot isolate candidates here and the operator did not opt out."""


@dataclass(frozen=True)
class Isolation:
    """Whether the sandbox isolates candidates on this machine, and if not, why (``reason``)."""

    available: bool
    reason: str = ""

    def describe(self) -> str:
        """One line for logs and ``/readyz``."""
        return "isolated (bubblewrap + seccomp)" if self.available else f"NOT isolated: {self.reason}"


# A failed probe is tried again after this long: an operator may install bubblewrap meanwhile.
REPROBE_FAILURE_S = 60.0
_last_probe: dict[str, tuple[float, Isolation]] = {}  # "state" -> (monotonic seconds, result)


def isolation() -> Isolation:
    """Whether the full isolation works here (see ``probe_isolation``); a success is kept for the
    process's life, a failure for ``REPROBE_FAILURE_S`` seconds."""
    last = _last_probe.get("state")
    now = time.monotonic()
    if last is not None and (last[1].available or now - last[0] < REPROBE_FAILURE_S):
        return last[1]
    state = probe_isolation()
    _last_probe["state"] = (now, state)
    return state


def probe_isolation() -> Isolation:
    """Probe whether the full isolation works: bwrap and libseccomp are here and a sandboxed
    ``true`` runs cleanly (it fails, e.g., for a non-root verifier where user namespaces are off,
    or in a container whose seccomp profile forbids them)."""
    if shutil.which("bwrap") is None:
        return Isolation(False, "bubblewrap (bwrap) is not installed")
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return Isolation(False, "setpriv (util-linux) is not installed")
    try:
        _seccomp_program()
    except (ImportError, OSError, RuntimeError) as exc:
        return Isolation(False, f"libseccomp is not usable ({exc})")
    with tempfile.TemporaryDirectory(prefix="cuset-probe-") as folder:
        try:
            running = _Running(
                ["true"], Path(folder), SandboxLimits(wall_s=30), _Cgroups(None, None), {}, False, True, ()
            )
            probe = running.wait()
        except (OSError, SandboxSetupError) as exc:
            return Isolation(False, f"bubblewrap cannot set up a sandbox here: {_first_line(str(exc))}")
    if probe.returncode != 0:
        return Isolation(False, f"bubblewrap cannot set up a sandbox here: {_first_line(probe.stderr)}")
    return Isolation(True)


def _first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "no message")


def refusal() -> str | None:
    """Why tiers 1-3 must refuse to run a candidate here (None: isolated, or the operator opted
    out); the message says how to fix it."""
    state = isolation()
    if state.available or SandboxSettings().allow_unisolated:
        return None
    return (
        f"refused: the verification sandbox cannot isolate candidates on this machine ({state.reason}); "
        "see docs/deploy.md, or set CUSET_SANDBOX_ALLOW_UNISOLATED=1 for single-user local use only"
    )


def log_isolation(sandbox: SandboxSettings, logger: logging.Logger = log) -> Isolation:
    """Probe isolation and log the result at start-up: a warning when candidates would run
    unisolated because the operator opted out (``sandbox``, read at the process's edge), an error
    when tiers 1-3 will refuse."""
    state = isolation()
    if state.available:
        logger.info("verification sandbox: %s", state.describe())
    elif sandbox.allow_unisolated:
        logger.warning(
            "verification sandbox: %s; CUSET_SANDBOX_ALLOW_UNISOLATED is set, so candidates run "
            "WITHOUT isolation (single-user local use only)",
            state.describe(),
        )
    else:
        logger.error("verification sandbox: %s; tiers 1-3 will refuse every candidate", state.describe())
    return state


def run_sandboxed(
    argv: list[str],
    *,
    workdir: Path,
    limits: SandboxLimits,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    readable: Sequence[Path] = (),
    cancel: threading.Event | None = None,
) -> SandboxOutcome:
    """Run ``argv`` in ``workdir`` under ``limits`` and return how it ended; never raises for
    anything the command does and never waits longer than ``limits.wall_s`` (plus cleanup).

    ``env`` entries are added to the minimal environment of :func:`sandbox_env`; ``readable``
    folders are mounted read-only beside the toolchain, Python and this package. Raises
    :class:`IsolationUnavailable` where the sandbox cannot isolate and the operator did not opt
    out, :class:`SandboxSetupError` when setting it up failed, and :class:`SandboxCancelled`
    when ``cancel`` was set before the command ended (it is killed within ``CANCEL_POLL_S``).
    """
    running = _start(argv, workdir, limits, env, readable, stdin is not None)
    if stdin is not None:
        threading.Thread(target=_feed, args=(running.process.stdin, stdin), daemon=True).start()
    return running.wait(cancel)


def start_sandboxed(
    argv: list[str],
    *,
    workdir: Path,
    limits: SandboxLimits,
    env: dict[str, str] | None = None,
    readable: Sequence[Path] = (),
) -> StartedSandbox:
    """Start ``argv`` now, ahead of its last files, as :func:`run_sandboxed` would run it.

    The command gets what ``workdir`` holds now (it may be empty); :meth:`StartedSandbox.finish`
    later sends what the folder holds then, as a tar archive on the command's stdin, and waits
    for it within ``limits`` counted from that moment. So a harness can import its libraries
    while the judge is still preparing its inputs (``harness_side.run_side --late``). Same errors as
    :func:`run_sandboxed`."""
    return StartedSandbox(_start(argv, workdir, limits, env, readable, True))


class StartedSandbox:
    """A command started by :func:`start_sandboxed`: finished once, or abandoned (leaving a
    ``with`` block abandons it unless it was finished)."""

    def __init__(self, running: _Running) -> None:
        self._running: _Running | None = running

    def __enter__(self) -> StartedSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abandon()

    def finish(self, cancel: threading.Event | None = None) -> SandboxOutcome:
        """Send the work folder's files now on stdin, then wait for the command and return how it
        ended; ``SandboxCancelled`` (the command killed) when ``cancel`` is set meanwhile."""
        running, self._running = self._running, None
        if running is None:
            raise RuntimeError("this sandboxed command was already finished or abandoned")
        running.restart_clock()
        threading.Thread(target=_feed, args=(running.process.stdin, _pack(running.workdir)), daemon=True).start()
        return running.wait(cancel)

    def alive(self) -> bool:
        """Whether the command still runs (it was neither finished nor abandoned, and has not ended)."""
        running = self._running
        return running is not None and running.failed_start is None and running.process.poll() is None

    def abandon(self) -> None:
        """Kill the command if it was never finished (its files and output are dropped)."""
        running, self._running = self._running, None
        if running is not None:
            running.kill()


def _start(
    argv: list[str],
    workdir: Path,
    limits: SandboxLimits,
    env: dict[str, str] | None,
    readable: Sequence[Path],
    with_stdin: bool,
) -> _Running:
    isolated = isolation().available
    if not isolated and (reason := refusal()):
        raise IsolationUnavailable(reason)
    groups = _make_cgroups(limits)
    return _Running(argv, Path(workdir).resolve(), limits, groups, env or {}, with_stdin, isolated, tuple(readable))
