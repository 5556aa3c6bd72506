"""Running a command in the sandbox: the child's set-up between fork and exec, bwrap's command
line with the wrapper that copies the work folder in and out, the wait within the limits, the
kill of everything it started, and how it ended (:class:`SandboxOutcome`)."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cuset_core.verify.sandbox.cgroups import _Cgroups, _release_cgroups, _user_tasks
from cuset_core.verify.sandbox.policy import _bwrap_args, _privilege_drop, sandbox_env
from cuset_core.verify.sandbox.seccomp import _seccomp_program
from cuset_core.verify.sandbox.transfer import _memfd, _pack, unpack_files
from cuset_core.verify.settings import SandboxLimits

OUTPUT_TAIL_BYTES = 20_000
_PR_SET_PDEATHSIG = 1
# Messages by which common runtimes report a refused allocation or an oversized write.
_MEMORY_MARKERS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory")
# How a refused fork reads under RLIMIT_NPROC (the process cap without a pids cgroup).
_PROCESS_MARKERS = ("BlockingIOError: [Errno 11]", "fork: Resource temporarily unavailable", "Cannot fork")
_FILE_SIZE_MARKERS = ("File too large", "EFBIG", "No space left on device", "ENOSPC")
_READY = b"R"  # the wrapper's first byte on the copy-out pipe: set-up done, the command starts
# Inside the sandbox, as the sandbox's user: unpack the caller's files into the tmpfs work
# folder, say ready, run the command (without the two pipes), kill whatever it left behind,
# then pack the work folder back. A failed step exits 111 before the ready byte.
_WRAPPER = r"""
tar -x -f - -C "$0" <&4 || exit 111
exec 4<&-
printf R >&3 || exit 111
"$@" 3>&-
status=$?
kill -KILL -1 2>/dev/null
tar -c -f - -C "$0" . >&3
exit $status
"""


class SandboxSetupError(RuntimeError):
    """A step of setting up the sandbox failed; the command did not run."""


class SandboxCancelled(RuntimeError):
    """The caller cancelled the command while it ran: it was killed, and nothing of it is kept."""


CANCEL_POLL_S = 0.05  # how often a cancellable command's wait looks at its cancel event


@dataclass(frozen=True)
class SandboxOutcome:
    """How a sandboxed command ended.

    ``returncode`` is None when it was killed for the wall-clock limit; ``signal`` is the
    signal that ended it, if any. ``stdout``/``stderr`` are the last ``OUTPUT_TAIL_BYTES``
    bytes, decoded. ``limit_hit`` names the limit that stopped it: ``"wall"``, ``"cpu"``,
    ``"memory"``, ``"file_size"``, ``"processes"`` or None. ``isolation`` lists the
    protections that held (see the package's docstring).
    """

    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    timed_out: bool
    signal: int | None
    limit_hit: str | None
    isolation: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when the command exited 0 within every limit."""
        return self.returncode == 0 and self.limit_hit is None


def _preexec(limits: SandboxLimits, groups: _Cgroups, fds: tuple[int, ...] = ()):
    """The child-side setup, run between fork and exec: death signal, cgroups, rlimits, and
    ``fds`` moved to 3, 4, ... (the numbers bwrap and the wrapper expect).

    RLIMIT_NPROC counts all of a user's tasks and never binds root, so it is the cap only for
    a non-root user without a cgroup, set to what that user already runs plus the allowance.
    """
    memory = (limits.address_space_mb or limits.memory_mb) * 1024 * 1024
    file_size = limits.file_size_mb * 1024 * 1024
    uid = os.geteuid()
    nproc = None if groups.pids is not None or uid == 0 else _user_tasks(uid) + limits.max_processes

    libc = ctypes.CDLL(None, use_errno=True)
    verifier = os.getpid()

    def setup() -> None:
        # If the verifier dies, the kernel kills bwrap, whose --die-with-parent takes the whole
        # PID namespace with it, instead of leaving the sandbox to run unwatched.
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != verifier:  # it died between fork and prctl: no signal will come
            os._exit(1)
        os.umask(0o022)  # bwrap makes the mount points' parent folders with it: the uid must pass
        for group in groups.folders():
            (group / "cgroup.procs").write_text(str(os.getpid()))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        # First out of the way of 3, 4, ... which they may hold: copies numbered above them.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3 + len(fds)) for fd in fds]
        for target, fd in enumerate(high, start=3):
            os.dup2(fd, target)  # inheritable, as bwrap and the wrapper need them
            os.close(fd)
        # Nothing else of the verifier's reaches the sandbox: every other descriptor the exec
        # would keep is closed (those marked close-on-exec, Popen's error pipe among them, go at exec).
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            with contextlib.suppress(OSError):  # the listing's own descriptor, gone by now
                if fd >= 3 + len(high) and os.get_inheritable(fd):
                    os.close(fd)

    return setup


class _Tail:
    """Drains a pipe in a thread, keeping only its last ``OUTPUT_TAIL_BYTES`` bytes."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self._data = bytearray()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        for chunk in iter(lambda: self._stream.read1(65536), b""):
            self._data += chunk
            if len(self._data) > 2 * OUTPUT_TAIL_BYTES:
                del self._data[: len(self._data) - OUTPUT_TAIL_BYTES]
        self._stream.close()

    def text(self, timeout: float) -> str:
        self._thread.join(timeout)
        return bytes(self._data[-OUTPUT_TAIL_BYTES:]).decode("utf-8", errors="replace")


class _Pipe:
    """Reads the copy-out pipe in a thread: the ready byte, then at most ``cap`` bytes of tar."""

    def __init__(self, fd: int, cap: int) -> None:
        self._stream = os.fdopen(fd, "rb", buffering=0)
        self._data = bytearray()
        self._cap = cap
        self.overflow = False
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        with self._stream:
            while chunk := self._stream.read(1 << 16):
                if len(self._data) + len(chunk) > self._cap:
                    self.overflow = True
                    return
                self._data += chunk

    def result(self, timeout: float) -> tuple[bool, bytes]:
        """Whether the command started, and the archive the wrapper sent back."""
        self._thread.join(timeout)
        data = bytes(self._data)
        return data[:1] == _READY, data[1:]


def _limit_hit(
    returncode: int | None, timed_out: bool, forks_refused: bool, oom_killed: bool, stderr: str, cpu_spent: bool
) -> str | None:
    """Name the limit that stopped the command, most specific first.

    ``cpu_spent``: the run lasted at least the CPU limit, so a bare SIGKILL is the hard
    RLIMIT_CPU (a process that ignored the SIGXCPU warning) rather than the OOM killer.
    """
    if forks_refused:
        return "processes"
    if oom_killed:
        return "memory"
    if timed_out:
        return "wall"
    if returncode is None or returncode == 0:
        return None
    if returncode == -signal.SIGXCPU or (returncode == -signal.SIGKILL and cpu_spent):
        return "cpu"
    if any(m in stderr for m in _PROCESS_MARKERS):
        return "processes"
    if returncode == -signal.SIGXFSZ or any(m in stderr for m in _FILE_SIZE_MARKERS):
        return "file_size"
    if any(m in stderr for m in _MEMORY_MARKERS):
        return "memory"
    return None


class _Running:
    """A started command (in bwrap when ``isolated``): wait for it within the limits, copy its
    work folder back, release its cgroups."""

    def __init__(
        self,
        argv: list[str],
        workdir: Path,
        limits: SandboxLimits,
        groups: _Cgroups,
        env: dict[str, str],
        with_stdin: bool,
        isolated: bool,
        readable: tuple[Path, ...],
    ) -> None:
        self.workdir, self.limits, self.groups, self.isolated, self.argv = workdir, limits, groups, isolated, argv
        self.isolation_held = (
            ("pid_ns", "net_ns", "ipc_ns", "min_root", "capped_workdir", "non_root", "seccomp") if isolated else ()
        ) + tuple(name for name, group in (("pids_cgroup", groups.pids), ("memory_cgroup", groups.memory)) if group)
        command, child_fds, self.copy_out = list(argv), [], None
        if isolated:
            read_end, write_end = os.pipe()
            child_fds = [write_end, _memfd("cuset-in", _pack(workdir)), _memfd("cuset-seccomp", _seccomp_program())]
            command = _command(argv, workdir, limits, readable)
            self.copy_out = _Pipe(read_end, (limits.workdir_mb << 20) + (limits.workdir_mb << 16) + (1 << 20))
        self.start = time.monotonic()
        self.failed_start: str | None = None
        try:
            self.process = subprocess.Popen(
                command,
                cwd=workdir,
                env=sandbox_env(workdir, env),
                stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                # Not pass_fds: Popen would mark 3, 4, ... inheritable in the child before the
                # set-up moves the descriptors there, and fails (EBADF) when the verifier holds
                # no descriptor of that number at that moment, which another thread's sandbox
                # coming and going makes happen. The set-up closes what else could be inherited.
                close_fds=False,
                preexec_fn=_preexec(limits, groups, tuple(child_fds)),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            _release_cgroups(groups)
            if isolated:
                raise SandboxSetupError(f"could not start bwrap: {exc}") from exc
            self.failed_start = f"could not start {argv[0]!r}: {exc}"
            return
        finally:
            for fd in child_fds:
                os.close(fd)
        self.out, self.err = _Tail(self.process.stdout), _Tail(self.process.stderr)

    def _ended_in_time(self, cancel: threading.Event | None) -> bool:
        """Wait for the command until the wall-clock limit (or ``cancel``); whether it timed out."""
        deadline = self.start + self.limits.wall_s
        while True:
            left = max(0.0, deadline - time.monotonic())
            try:
                self.process.wait(timeout=left if cancel is None else min(left, CANCEL_POLL_S))
                return False
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    return True
                if cancel is not None and cancel.is_set():
                    return False

    def restart_clock(self) -> None:
        """Count the wall-clock limit from now (the command waited for its files until now)."""
        self.start = time.monotonic()

    def kill(self) -> None:
        if self.failed_start is None:
            _kill_sandbox(self.process)
            self.process.wait()
            _release_cgroups(self.groups)

    def wait(self, cancel: threading.Event | None = None) -> SandboxOutcome:
        if self.failed_start is not None:
            return SandboxOutcome(None, "", self.failed_start, 0.0, False, None, None, ())
        process, limits = self.process, self.limits
        timed_out = self._ended_in_time(cancel)
        if cancel is not None and cancel.is_set() and process.poll() is None:
            self.kill()
            raise SandboxCancelled(f"{self.argv[0]!r} was cancelled")
        _kill_sandbox(process)
        process.wait()
        forks_refused, oom_killed = _release_cgroups(self.groups)
        wall_s = time.monotonic() - self.start
        stdout, stderr = self.out.text(timeout=2.0), self.err.text(timeout=2.0)
        if self.copy_out is not None:
            started, archive = self.copy_out.result(timeout=10.0)
            if not started and not timed_out:
                raise SandboxSetupError(f"the sandbox could not be set up: {stderr.strip()[-2000:] or 'no message'}")
            unpack_files(archive, self.workdir)
        returncode = None if timed_out else _status(process.returncode, self.isolated)
        sig = -returncode if returncode is not None and returncode < 0 else None
        if timed_out:
            sig = signal.SIGKILL
        return SandboxOutcome(
            returncode=returncode,
            stdout=stdout,
            stderr=stderr,
            wall_s=wall_s,
            timed_out=timed_out,
            signal=sig,
            limit_hit=_limit_hit(returncode, timed_out, forks_refused, oom_killed, stderr, wall_s >= limits.cpu_s),
            isolation=self.isolation_held,
        )


def _status(returncode: int, isolated: bool) -> int:
    """The command's status, negative for a signal as in ``subprocess``.

    Isolated, the command runs under a shell that reports death by signal N as 128 + N (it
    does not exec the command, because as PID 1 of its namespace the command would be immune
    to its own signals, e.g. ``abort()``); a command that exits 129..192 itself reads the same.
    """
    if isolated and 128 < returncode <= 128 + 64:
        return 128 - returncode
    return returncode


def _kill_sandbox(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the sandbox's process, its session (stragglers included) and its children.

    Isolated, the process is bwrap, and its child is PID 1 of the sandbox's namespaces, in a session
    of its own. That child arms its parent-death signal only after it has forked the command, so
    a kill of bwrap alone in that gap left it running the command unwatched (seen under load as
    an unprivileged user). bwrap is stopped first, so that it starts nothing more; killing PID 1
    of a PID namespace kills everything in it. (Once the process has been reaped, its pid may
    name another process: only its session is left to kill then.)
    """
    pid, children = process.pid, []
    if process.returncode is None:
        try:
            os.kill(pid, signal.SIGSTOP)
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            pass  # it exited meanwhile, or the kernel has no children file: the session is all
    for child in children:
        try:
            os.kill(int(child), signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _command(argv: list[str], workdir: Path, limits: SandboxLimits, readable: Sequence[Path] = ()) -> list[str]:
    """``argv`` wrapped in bwrap, the uid change (as root) and the copy-in/copy-out wrapper."""
    bwrap = _bwrap_args(workdir, limits, readable, argv[0] if argv else None)
    return [*bwrap, "--", *_privilege_drop(), "sh", "-c", _wrapper(), str(workdir), *argv]


def _wrapper() -> str:
    """The wrapper's script, first giving the sandbox's session the verifier's scheduling-group
    niceness when it has one: with autogroups (Linux's default), the CPU is shared between
    sessions by each group's niceness, and bwrap's new session would start at 0, so a verifier run
    at nice 19 beside other work (an experiment, a fidelity run) took half the CPU through its
    sandboxes. Raising one's own niceness needs no privilege, and the command cannot lower it;
    without CAP_SYS_ADMIN the kernel takes one such change every 100 ms (EAGAIN otherwise), hence
    the few tries."""
    nice = session_niceness()
    if nice <= 0:
        return _WRAPPER
    tries = f"for _ in 1 2 3 4 5; do echo {nice} > /proc/self/autogroup 2>/dev/null && break; sleep 0.05; done\n"
    return tries + _WRAPPER


def session_niceness() -> int:
    """This process's scheduling-group (autogroup) niceness; 0 where the kernel has none."""
    try:
        return int(Path("/proc/self/autogroup").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return 0


def describe(outcome: SandboxOutcome) -> str:
    """One line on how the command ended, for logs and verdict reasons."""
    if outcome.limit_hit == "wall":
        return f"killed after the wall-clock limit ({outcome.wall_s:.1f} s)"
    if outcome.limit_hit:
        return f"stopped by the {outcome.limit_hit.replace('_', ' ')} limit"
    if outcome.signal is not None:
        try:
            name = signal.Signals(outcome.signal).name
        except ValueError:
            name = str(outcome.signal)
        if outcome.signal == signal.SIGSYS:
            # A seccomp filter's trap whose handler could not run (the signal was blocked, as
            # glibc's pthread_create blocks every signal around clone) kills with SIGSYS itself.
            return f"killed by signal {name}: it made a system call that a seccomp filter refuses"
        return f"killed by signal {name}"
    return f"exited with status {outcome.returncode}"
