"""Run untrusted candidate code (compilers, extensions, kernels) in a contained child process.

What is enforced, each where the machine allows it (``isolation`` in the outcome says which
held for a run; all of them do when running as root with ``unshare`` and cgroups, as here):

- ``pid_ns``: own PID namespace (``unshare --pid --fork``) under a shell that is its PID 1, so
  when the command ends or is killed, every process it started dies with it, daemons included.
- ``net_ns``: own network namespace with only a loopback that is down: no connection to
  anything, 127.0.0.1 included.
- ``ro_fs``: own mount namespace in which every mount is re-bound read-only except the work
  folder (and ``writable`` extras); writes elsewhere fail with EROFS. ``/dev`` is a fresh tmpfs
  holding only null, zero, full, random, urandom, tty and the GPU's nodes (a read-only mount
  does not stop writes to device nodes such as disks), plus a small writable ``/dev/shm``;
  ``/proc/sys``, ``/proc/sysrq-trigger`` and friends are read-only.
- ``no_caps``: every capability dropped and ``no_new_privs`` set before the command runs, so
  it cannot undo the above although its uid is 0.
- ``pids_cgroup``: a pids cgroup caps processes and threads together (RLIMIT_NPROC does not
  bind root); ``memory_cgroup``: a memory cgroup caps the memory of all of them together
  (RLIMIT_AS is per process). Both are created inside the caller's own cgroups.
- Always: a new session (process group) killed as a whole at the end, rlimits on CPU time,
  address space, file size and core dumps, cwd/HOME/TMPDIR in the work folder, a minimal
  environment built from scratch (nothing of the parent's is inherited), bounded output.
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cuset_core.verify.settings import SandboxLimits

OUTPUT_TAIL_BYTES = 20_000
_PR_SET_PDEATHSIG = 1
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_CGROUP_PREFIX = "cuset-sandbox-"
HIDE_ENV = "CUSET_SANDBOX_HIDE"
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Messages by which common runtimes report a refused allocation or an oversized write.
_MEMORY_MARKERS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory")
_FILE_SIZE_MARKERS = ("File too large", "EFBIG")

# Runs inside the new namespaces as root, then runs the command with every capability dropped.
# ``remount,bind`` changes only this namespace's view. Steps: writable folders become mounts of
# their own; a fresh /dev with harmless nodes (major/minor copied from the real ones) and a
# small /dev/shm; hidden folders covered by an empty tmpfs and hidden files by /dev/null; every
# other mount read-only; the writable parts of /proc read-only.
_INIT_SCRIPT = r"""
n="$1"; shift
workdir="$1"; keep="|/dev/shm"
while [ "$n" -gt 0 ]; do mount --bind "$1" "$1" || exit 111; keep="$keep|$1"; shift; n=$((n - 1)); done
m="$1"; shift; hidden=""
while [ "$m" -gt 0 ]; do hidden="$hidden
$1"; shift; m=$((m - 1)); done
nodes=""
for d in /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty /dev/nvidia*; do
  [ -c "$d" ] && nodes="$nodes $d:$(stat -c '%t:%T:%a' "$d")"
done
make_node() { mknod -m "$4" "$1" c "$((0x$2))" "$((0x$3))"; }
mount -t tmpfs -o mode=755,size=1m cuset-dev /dev || exit 111
for spec in $nodes; do IFS=:; make_node $spec; IFS=' '; done
mkdir /dev/shm && mount -t tmpfs -o mode=1777,size=64m cuset-shm /dev/shm
ln -s /proc/self/fd /dev/fd; ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout; ln -s /proc/self/fd/2 /dev/stderr
echo "$hidden" | while IFS= read -r h; do
  if [ -d "$h" ]; then mount -t tmpfs -o size=4k,mode=000 cuset-hidden "$h" || exit 111
  elif [ -e "$h" ]; then mount --bind /dev/null "$h" || exit 111; fi
done || exit 111
while read -r _dev mp _rest; do
  case "$mp" in /proc|/proc/*) continue;; esac
  case "$keep|" in *"|$mp|"*) continue;; esac
  mount -o remount,bind,ro "$mp" 2>/dev/null
done < /proc/self/mounts
for p in sys sysrq-trigger irq bus fs; do
  [ -e "/proc/$p" ] && mount --bind "/proc/$p" "/proc/$p" && mount -o remount,bind,ro "/proc/$p"
done
cd "$workdir" || exit 111  # the inherited cwd still points into the read-only mount
setpriv --no-new-privs --bounding-set=-all --inh-caps=-all -- "$@"
"""


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


@functools.lru_cache(maxsize=1)
def namespaces_available() -> bool:
    """Whether the full isolation works here: the namespace launcher runs ``true`` cleanly."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")):
        return False
    with tempfile.TemporaryDirectory(prefix="cuset-probe-") as folder:
        try:
            probe = subprocess.run(_command(["true"], [Path(folder)]), cwd=folder, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return False
    return probe.returncode == 0


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


def _preexec(limits: SandboxLimits, groups: _Cgroups):
    """The child-side setup, run between fork and exec: death signal, cgroups, rlimits.

    RLIMIT_NPROC counts all of a user's tasks and never binds root, so it is the cap only for
    a non-root user without a cgroup, set to what that user already runs plus the allowance.
    """
    memory = limits.memory_mb * 1024 * 1024
    file_size = limits.file_size_mb * 1024 * 1024
    uid = os.geteuid()
    nproc = None if groups.pids is not None or uid == 0 else _user_tasks(uid) + limits.max_processes

    libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        # If the verifier dies, the kernel kills the sandbox (unshare --kill-child takes the
        # namespace with it) instead of leaving it to run unwatched.
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        for group in groups.folders():
            (group / "cgroup.procs").write_text(str(os.getpid()))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return setup


def sandbox_env(workdir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a sandboxed command sees: built from scratch, plus ``extra``."""
    env = {
        "PATH": os.environ.get("PATH", _DEFAULT_PATH),
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
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


def hidden_paths() -> list[str]:
    """Folders and files a candidate must not see at all, from ``CUSET_SANDBOX_HIDE``
    (``os.pathsep``-separated). A service sets it to its artifact root and database files, which
    are readable by the user the verifier runs as; read-only is not enough for them."""
    listed = os.environ.get(HIDE_ENV, "")
    return [str(Path(p).resolve()) for p in listed.split(os.pathsep) if p.strip()]


def _command(argv: list[str], writable: Iterable[Path]) -> list[str]:
    """Wrap ``argv`` in the namespace launcher."""
    folders = [str(Path(w).resolve()) for w in writable]
    # A hidden folder that holds a writable one would hide it too; such a pair is a setup error.
    hidden = [h for h in hidden_paths() if not any(f == h or f.startswith(h + os.sep) for f in folders)]
    return [
        "unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--mount",
        "--propagation", "private",
        "sh", "-c", _INIT_SCRIPT, "sandbox-init", str(len(folders)), *folders, str(len(hidden)), *hidden, *argv,
    ]  # fmt: skip


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
    writable: tuple[Path, ...] = (),
) -> SandboxOutcome:
    """Run ``argv`` in ``workdir`` under ``limits`` and return how it ended; never raises for
    anything the command does and never waits longer than ``limits.wall_s`` (plus cleanup).

    ``env`` entries are added to the minimal environment of :func:`sandbox_env`. ``writable``
    names folders besides ``workdir`` the command may write (e.g. a shared build cache).
    """
    workdir = Path(workdir).resolve()
    groups = _make_cgroups(limits)
    isolated = namespaces_available()
    command = _command(argv, (workdir, *writable)) if isolated else list(argv)
    isolation = (("pid_ns", "net_ns", "ro_fs", "no_caps") if isolated else ()) + tuple(
        name for name, group in (("pids_cgroup", groups.pids), ("memory_cgroup", groups.memory)) if group
    )
    start = time.monotonic()
    try:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=sandbox_env(workdir, env),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_preexec(limits, groups),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        _release_cgroups(groups)
        return SandboxOutcome(None, "", f"could not start {argv[0]!r}: {exc}", 0.0, False, None, None, isolation)
    out, err = _Tail(process.stdout), _Tail(process.stderr)
    if stdin is not None:
        threading.Thread(target=_feed, args=(process.stdin, stdin), daemon=True).start()
    timed_out = False
    try:
        process.wait(timeout=limits.wall_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    _kill_group(process.pid)
    process.wait()
    forks_refused, oom_killed = _release_cgroups(groups)
    wall_s = time.monotonic() - start
    stdout, stderr = out.text(timeout=2.0), err.text(timeout=2.0)
    returncode = None if timed_out else _status(process.returncode, isolated)
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
        isolation=isolation,
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


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except OSError:
        pass  # the command exited without reading all of its input


def _kill_group(pgid: int) -> None:
    """SIGKILL the whole session the sandbox started (stragglers included)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
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

