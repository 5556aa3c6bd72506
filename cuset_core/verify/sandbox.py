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
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import io
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuset_core.verify.settings import SandboxLimits, SandboxSettings

log = logging.getLogger(__name__)

OUTPUT_TAIL_BYTES = 20_000
_PR_SET_PDEATHSIG = 1
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_CGROUP_PREFIX = "cuset-sandbox-"
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Messages by which common runtimes report a refused allocation or an oversized write.
_MEMORY_MARKERS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory")
# How a refused fork reads under RLIMIT_NPROC (the process cap without a pids cgroup).
_PROCESS_MARKERS = ("BlockingIOError: [Errno 11]", "fork: Resource temporarily unavailable", "Cannot fork")
_FILE_SIZE_MARKERS = ("File too large", "EFBIG", "No space left on device", "ENOSPC")
# What a compiler, Python and the CUDA runtime need of /etc; nothing else of it is mounted.
# (Not passwd: who the users are is none of its business; USER in its environment names it.)
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "nsswitch.conf", "localtime", "nvidia")
# The child's extra descriptors, in this order from 3: the copy-out pipe (the wrapper's fd 3),
# the caller's files as a tar archive (its fd 4), the seccomp program (bwrap's --seccomp).
_SECCOMP_FD = 5
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
_BLOCKED_SYSCALLS = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "ptrace", "process_vm_readv", "process_vm_writev", "bpf",
    "keyctl", "add_key", "request_key", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "perf_event_open", "kexec_load", "init_module", "finit_module", "delete_module", "socket",
    "open_by_handle_at", "name_to_handle_at", "swapon", "swapoff", "reboot",
)  # fmt: skip
_NAMESPACE_FLAGS = {  # clone flags that create a namespace (linux/sched.h)
    "CLONE_NEWTIME": 0x00000080, "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000, "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000, "CLONE_NEWNET": 0x40000000,
}  # fmt: skip


class IsolationUnavailable(RuntimeError):
    """The sandbox cannot isolate candidates here and the operator did not opt out."""


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
    protections that held (see the module docstring).
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


@functools.lru_cache(maxsize=1)
def _seccomp_program() -> bytes:
    """The seccomp BPF program (libseccomp, via pyseccomp) that bwrap loads for the command:
    allow everything but the calls that could escape or attack the sandbox (see module doc)."""
    import pyseccomp as seccomp

    deny = seccomp.ERRNO(errno.EPERM)
    program = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in _BLOCKED_SYSCALLS:
        program.add_rule(deny, name)
    for flag in _NAMESPACE_FLAGS.values():
        program.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory that seccomp cannot read; ENOSYS makes libc use clone.
    program.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    return exported_bpf(program)


def exported_bpf(program: Any) -> bytes:
    """A pyseccomp ``SyscallFilter`` as the BPF program the kernel loads (``struct sock_filter``s)."""
    with tempfile.TemporaryFile() as exported:
        program.export_bpf(exported)
        exported.seek(0)
        return exported.read()


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


def sandbox_env(workdir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a sandboxed command sees: built from scratch, plus ``extra``."""
    env = {
        "PATH": os.environ.get("PATH", _DEFAULT_PATH),
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "USER": "cuset-sandbox",
        "LOGNAME": "cuset-sandbox",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }
    env.update(extra or {})
    return env


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


def _readable_roots(extra: Sequence[Path] = ()) -> list[Path]:
    """Folders mounted read-only: the toolchain, Python and this package (nothing else of the
    repository it lives in), the CUDA toolkit, and the ``extra`` folders the caller names (the
    CPU tier's precompiled preludes)."""
    import cuset_core

    roots = [Path("/usr"), Path(sys.prefix), Path(sys.base_prefix), Path(cuset_core.__file__).parent, *extra]
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(name):
            roots.append(Path(os.environ[name]))
    for tool in ("nvcc", "g++", "c++"):
        if found := shutil.which(tool):
            roots += [Path(found).parent, Path(found).resolve().parent.parent]
    # Both the path as named and where its links lead (a venv reached through a link is run
    # by the name, and its python links into the base installation).
    roots = [path for root in roots if root.exists() for path in (Path(os.path.abspath(root)), root.resolve())]
    return [root for root in sorted(set(roots)) if not any(o != root and o in root.parents for o in roots)]


# How many links one path may pass through, as the kernel's own limit (MAXSYMLINKS, 40).
_MAX_LINKS = 40


def link_chain(path: str | Path) -> tuple[list[tuple[str, str]], str]:
    """The links met on the way to ``path`` (absolute, or relative to the cwd), in the order the
    kernel follows them, each as (where the link is, what it says), and the real path it ends at.

    Each component is looked at in turn, as the kernel resolves a name: a link anywhere (a folder
    on the way, the file itself, a link to a link, a relative target) is one step; so every link
    a sandboxed exec of ``path`` passes is listed, each at a path whose folders are real. A loop
    ends the walk after ``_MAX_LINKS`` links (the exec would fail the same way outside)."""
    name = os.fspath(path)
    absolute = name if os.path.isabs(name) else os.path.join(os.getcwd(), name)
    pending = absolute.split("/")[::-1]  # a stack: the next component last
    links: list[tuple[str, str]] = []
    current = "/"
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        if not os.path.islink(candidate):
            current = candidate
            continue
        if len(links) >= _MAX_LINKS:
            break
        target = os.readlink(candidate)
        links.append((candidate, target))
        if os.path.isabs(target):
            current = "/"
        pending.extend(reversed(target.split("/")))
    return links, current


def _interpreters(argv0: str | None) -> list[str]:
    """The programs whose links the sandbox reproduces: the command's own (as the sandbox's PATH
    finds it), the verifier's interpreter (tier 1-3's sides run it) and the toolchain's."""
    programs = [sys.executable]
    if argv0:
        programs.append(argv0 if "/" in argv0 else shutil.which(argv0) or "")
    programs += [found for tool in ("nvcc", "g++", "c++") if (found := shutil.which(tool))]
    return [program for program in programs if program]


def _link_mounts(programs: Sequence[str], covered: Sequence[Path], workdir: Path) -> tuple[dict[str, str], list[str]]:
    """What makes each of ``programs`` runnable by its name in the sandbox when a link on its way
    lies outside the folders mounted anyway (``covered``): each such link, made again as the same
    link (dest -> what it says), and the real file at the end, mounted read-only by itself.

    A venv made with a Python reached through a link in another folder (a folder of links, a
    user's ``~/bin``, ``/etc/alternatives``) has its ``bin/python`` point into that folder; the
    venv and the base installation are mounted, the folder in between is not. Only the links
    themselves are made, not their folders: nothing else a user keeps there is shown. A link
    where a mount point's folder must be (a folder on the way to a mounted root) is left to that
    mount (the root's own real path is mounted too)."""
    symlinks: dict[str, str] = {}
    files: list[str] = []
    keep_out = [*covered, workdir]
    for program in programs:
        try:
            links, real = link_chain(program)
        except OSError:
            continue
        for where, target in links:
            if _under(where, keep_out) or any(Path(where) in root.parents for root in keep_out):
                continue
            symlinks.setdefault(where, target)
        if links and os.path.isfile(real) and not _under(real, keep_out) and real not in files:
            files.append(real)
    return symlinks, files


def _under(path: str, folders: Iterable[Path]) -> bool:
    return any(path == str(f) or path.startswith(str(f) + os.sep) for f in folders)


def _bwrap_args(
    workdir: Path, limits: SandboxLimits, readable: Sequence[Path] = (), argv0: str | None = None
) -> list[str]:
    """bwrap's options for one run: namespaces, the minimal root, the tmpfs work folder; the
    links on the way to ``argv0`` and the verifier's interpreter (:func:`_link_mounts`)."""
    args = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session"]  # fmt: skip
    if os.geteuid() == 0:
        # setpriv (the first command) needs these to become the sandbox's uid and to empty the
        # bounding set; it drops them all before the wrapper runs.
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    else:
        args += ["--unshare-user", "--disable-userns"]
    roots = _readable_roots(readable)
    top = [Path("/") / link for link in ("bin", "lib", "lib64", "sbin")]
    etc = [Path("/etc") / name for name in _ETC_FILES]
    symlinks, files = _link_mounts(_interpreters(argv0), [*roots, *top, *etc], workdir)
    # bwrap would make the mount points' parents 0700, which the sandbox's uid could not pass.
    dests = (*roots, workdir, Path("/etc/x"), *map(Path, symlinks), *map(Path, files))
    parents = {p for dest in dests for p in dest.parents if p != Path("/")}
    for parent in sorted(parents, key=lambda p: len(p.parts)):
        if not _under(str(parent), roots):
            args += ["--perms", "0755", "--dir", str(parent)]
    for root in roots:
        args += ["--ro-bind", str(root.resolve()), str(root)]
    for target in top:
        if target.is_symlink():
            args += ["--symlink", os.readlink(target), str(target)]
        elif target.is_dir():
            args += ["--ro-bind", str(target), str(target)]
    for name in _ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    # The links on the way to the interpreter that no mount above brings (a venv made through a
    # folder of links: every side of tiers 1-3 would exit 127), and the file they end at.
    for where, says in sorted(symlinks.items()):
        args += ["--symlink", says, where]
    for real in files:
        args += ["--ro-bind", real, real]
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(64 << 20), "--tmpfs", "/dev/shm"]
    gpu_nodes = sorted(Path("/dev").glob("nvidia*"))
    for node in gpu_nodes:
        args += ["--dev-bind", str(node), str(node)]
    if gpu_nodes:  # the CUDA driver reads the devices' PCI topology; read-only
        args += ["--ro-bind-try", "/sys", "/sys"]
    for hidden in (str(Path(p).resolve()) for p in limits.hidden):
        if not _under(hidden, roots) or _under(str(workdir), [Path(hidden)]):
            continue
        # An empty folder nobody may enter; for a file, the null device (a read gets nothing).
        args += (
            ["--perms", "0000", "--size", "4096", "--tmpfs", hidden]
            if Path(hidden).is_dir()
            else ["--dev-bind", "/dev/null", hidden]
        )
    args += ["--perms", "1777", "--size", str(limits.workdir_mb << 20), "--tmpfs", str(workdir),
             "--chdir", str(workdir), "--seccomp", str(_SECCOMP_FD)]  # fmt: skip
    return args


def _command(argv: list[str], workdir: Path, limits: SandboxLimits, readable: Sequence[Path] = ()) -> list[str]:
    """``argv`` wrapped in bwrap, the uid change (as root) and the copy-in/copy-out wrapper."""
    drop: list[str] = []
    if os.geteuid() == 0:
        uid = str(SandboxSettings().uid)
        drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all", "--no-new-privs", "--"]  # fmt: skip
    bwrap = _bwrap_args(workdir, limits, readable, argv[0] if argv else None)
    return [*bwrap, "--", *drop, "sh", "-c", _wrapper(), str(workdir), *argv]


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


def _pack(folder: Path) -> bytes:
    """The caller's files in ``folder`` as a tar archive (regular files and folders)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue
            archive.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buffer.getvalue()


def unpack_files(data: bytes, folder: Path) -> None:
    """Extract a tar archive of :func:`_pack`'s kind into ``folder``: regular files and folders
    only, each inside it (no absolute names, no ``..``, no links or devices). What copies the
    command's files back, and what a command started early unpacks its late files with."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            members = [m for m in archive.getmembers() if m.isreg() or m.isdir()]
            for member in members:
                target = folder / member.name
                if target.is_symlink() or (target.exists() and target.is_dir() != member.isdir()):
                    continue
                _extract(archive, member, folder)
    except (tarfile.TarError, OSError, ValueError):
        pass  # a truncated or garbled archive: the command (or the cap) broke it; keep what came


def _extract(archive: tarfile.TarFile, member: tarfile.TarInfo, folder: Path) -> None:
    """Extract one regular file or folder of ``archive`` into ``folder``, as data only.

    tarfile's ``data`` filter (no owner, no setuid/setgid/sticky bits, no group or other write,
    nothing outside ``folder``) exists from Python 3.11.4 (and 3.8.17, 3.9.17, 3.10.12); before
    that, the same rules are checked here and the member is written with safe modes."""
    if hasattr(tarfile, "data_filter"):
        archive.extract(member, folder, filter="data")
        return
    parts = Path(member.name).parts
    if not (member.isreg() or member.isdir()) or Path(member.name).is_absolute() or ".." in parts:
        raise tarfile.TarError(f"refused archive member {member.name!r}")
    target = folder.joinpath(*parts)
    if not target.resolve().is_relative_to(folder.resolve()):
        raise tarfile.TarError(f"archive member {member.name!r} leads outside the folder")
    if member.isdir():
        target.mkdir(mode=0o755, parents=True, exist_ok=True)
        return
    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    source = archive.extractfile(member)
    if source is None:
        raise tarfile.TarError(f"archive member {member.name!r} has no data")
    mode = 0o755 if member.mode & 0o100 else 0o644
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with source, os.fdopen(descriptor, "wb") as written:
        shutil.copyfileobj(source, written)
    os.chmod(target, mode)


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


def _memfd(name: str, data: bytes) -> int:
    """An anonymous in-memory file holding ``data``, positioned at its start."""
    fd = os.memfd_create(name)
    view = memoryview(data)
    written = 0
    while written < len(view):
        written += os.write(fd, view[written:])
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _status(returncode: int, isolated: bool) -> int:
    """The command's status, negative for a signal as in ``subprocess``.

    Isolated, the command runs under a shell that reports death by signal N as 128 + N (it
    does not exec the command, because as PID 1 of its namespace the command would be immune
    to its own signals, e.g. ``abort()``); a command that exits 129..192 itself reads the same.
    """
    if isolated and 128 < returncode <= 128 + 64:
        return 128 - returncode
    return returncode


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except OSError:
        pass  # the command exited without reading all of its input


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
        return f"killed by signal {name}"
    return f"exited with status {outcome.returncode}"
