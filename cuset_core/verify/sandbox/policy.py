"""What a sandboxed command may see and has: its namespaces, the mounts of its minimal root, the
links on the way to its interpreters, its privileges and its environment.

The fixed rules are tables, in the manner of nsjail's policy files: each entry says what (a path,
how it is mounted, an option, a variable) and why. :func:`_bwrap_args` reads them, with what only
one run can say (the readable roots found on this host, the links to its interpreters, the hidden
paths, the work folder), into bwrap's options; :func:`sandbox_env` reads :data:`ENVIRONMENT`.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cuset_core.verify.settings import SandboxLimits, SandboxSettings

# The child's extra descriptors, in this order from 3: the copy-out pipe (the wrapper's fd 3),
# the caller's files as a tar archive (its fd 4), the seccomp program (bwrap's --seccomp).
_SECCOMP_FD = 5
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Option:
    """A bwrap option that holds for every run, and why."""

    args: tuple[str, ...]
    why: str


# The namespaces and the lifetime: bwrap's own options, before any mount.
NAMESPACES: tuple[Option, ...] = (
    Option(("--unshare-pid",), "its own PID namespace: when the command ends, every process it started dies"),
    Option(("--unshare-net",), "its own network namespace: no interface but a downed loopback"),
    Option(("--unshare-ipc",), "its own System V IPC objects and POSIX message queues"),
    Option(("--unshare-uts",), "its own host name"),
    Option(("--unshare-cgroup-try",), "its own view of the cgroups, where the kernel has cgroup namespaces"),
    Option(("--die-with-parent",), "the sandbox ends when bwrap's parent (the verifier) dies"),
    Option(("--new-session",), "a session of its own, away from the verifier's terminal"),
)
# setpriv (the first command) needs these to become the sandbox's uid and to empty the
# bounding set; it drops them all before the wrapper runs.
AS_ROOT: tuple[Option, ...] = (
    Option(("--cap-drop", "ALL"), "no capability but the three below"),
    Option(("--cap-add", "CAP_SETUID"), "setpriv becomes the sandbox's uid"),
    Option(("--cap-add", "CAP_SETGID"), "setpriv becomes the sandbox's gid and clears the groups"),
    Option(("--cap-add", "CAP_SETPCAP"), "setpriv empties the bounding set"),
)
AS_USER: tuple[Option, ...] = (
    Option(("--unshare-user",), "a user namespace: the verifier's own uid, no capability outside it"),
    Option(("--disable-userns",), "no further user namespace inside it"),
)

How = Literal["ro", "ro-try", "host", "link", "dir", "proc", "dev", "tmpfs", "dev-bind", "devices"]


@dataclass(frozen=True)
class Mount:
    """One path of the sandbox's root: ``path``, ``how`` it is mounted, and ``why``.

    ``how``: ``ro`` the host's ``source`` (the same path unless named) read-only; ``ro-try`` the
    same, left out where the host has none; ``host`` as the host has it (a link as the same link,
    a folder read-only, nothing otherwise); ``link`` a link saying ``source``; ``dir`` an empty
    folder; ``proc`` a fresh /proc of the sandbox's PID namespace; ``dev`` bwrap's /dev of
    harmless nodes; ``tmpfs`` an empty in-memory folder of ``size`` bytes; ``dev-bind`` the host's
    ``source`` (the same path unless named) with its devices usable; ``devices`` each host node
    the glob ``path`` matches, as ``dev-bind``. ``perms`` sets the mode of what is made.
    ``with_gpu``: only where the machine has GPU nodes.
    """

    path: str
    how: How
    why: str
    source: str | None = None
    perms: str | None = None
    size: int | None = None
    with_gpu: bool = False


_TOP = "programs and libraries, usually a link into /usr"
# The host's top folders beside /usr, as the host has them; then the files of /etc.
SYSTEM: tuple[Mount, ...] = (
    Mount("/bin", "host", _TOP),
    Mount("/lib", "host", _TOP),
    Mount("/lib64", "host", _TOP),
    Mount("/sbin", "host", _TOP),
    # What a compiler, Python and the CUDA runtime need of /etc; nothing else of it is mounted.
    # (Not passwd: who the users are is none of its business; USER in its environment names it.)
    Mount("/etc/ld.so.cache", "ro-try", "where the dynamic linker finds the libraries"),
    Mount("/etc/ld.so.conf", "ro-try", "the dynamic linker's folders"),
    Mount("/etc/ld.so.conf.d", "ro-try", "the dynamic linker's folders"),
    Mount("/etc/alternatives", "ro-try", "the links the system's commands (cc, c++, python3) pass through"),
    Mount("/etc/nsswitch.conf", "ro-try", "how libc looks names up"),
    Mount("/etc/localtime", "ro-try", "the time zone"),
    Mount("/etc/nvidia", "ro-try", "the CUDA driver's settings"),
)
GPU_NODES = "/dev/nvidia*"
KERNEL: tuple[Mount, ...] = (
    Mount("/proc", "proc", "the sandbox's own processes only"),
    Mount("/dev", "dev", "harmless nodes only (null, zero, full, random, urandom, tty, ...)"),
    Mount("/dev/shm", "tmpfs", "shared memory between the command's processes", perms="1777", size=64 << 20),
    Mount(GPU_NODES, "devices", "the GPU, for tier 3"),
    # the CUDA driver reads the devices' PCI topology; read-only
    Mount("/sys", "ro-try", "the GPU's PCI topology, which the CUDA driver reads", with_gpu=True),
)


@dataclass(frozen=True)
class RootSource:
    """Where a folder mounted read-only comes from (``kind``), named by ``name``, and why.

    ``kind``: ``path`` the path ``name``; ``python`` the attribute ``name`` of :mod:`sys` (a
    prefix); ``package`` this package's folder; ``env`` the value of the environment variable
    ``name``, where set; ``tool`` the folder of the program ``name`` found on PATH and the
    installation it belongs to (two folders above where its links lead).
    """

    kind: Literal["path", "python", "package", "env", "tool"]
    name: str
    why: str


# Folders mounted read-only: the toolchain, Python and this package (nothing else of the
# repository it lives in), the CUDA toolkit, and the folders the caller names.
ROOTS: tuple[RootSource, ...] = (
    RootSource("path", "/usr", "the system's programs, libraries and headers"),
    RootSource("python", "prefix", "the Python environment the verifier runs in (its venv)"),
    RootSource("python", "base_prefix", "the Python installation the venv was made from"),
    RootSource("package", "cuset_core", "this package, which tiers 1-3's sides import"),
    RootSource("env", "CUDA_HOME", "the CUDA toolkit"),
    RootSource("env", "CUDA_PATH", "the CUDA toolkit"),
    RootSource("tool", "nvcc", "the CUDA compiler (tier 1)"),
    RootSource("tool", "g++", "the C++ compiler (tier 2's runtime and extensions)"),
    RootSource("tool", "c++", "the C++ compiler (tier 2's runtime and extensions)"),
)


@dataclass(frozen=True)
class Variable:
    """One variable of the sandbox's environment, its value and why. ``value`` is
    :data:`WORK_FOLDER` for the run's work folder; ``from_host``: the verifier's own value where
    it has one, ``value`` otherwise."""

    name: str
    value: str
    why: str
    from_host: bool = False


WORK_FOLDER = "<the work folder>"
# Built from scratch: nothing else of the verifier's environment reaches the command.
ENVIRONMENT: tuple[Variable, ...] = (
    Variable("PATH", _DEFAULT_PATH, "the tools by the names the verifier finds them", from_host=True),
    Variable("HOME", WORK_FOLDER, "the only folder the command may write"),
    Variable("TMPDIR", WORK_FOLDER, "the only folder the command may write"),
    Variable("USER", "cuset-sandbox", "who runs it, without /etc/passwd"),
    Variable("LOGNAME", "cuset-sandbox", "who runs it, without /etc/passwd"),
    Variable("LANG", "C.UTF-8", "the same text encoding on every host"),
    Variable("LC_ALL", "C.UTF-8", "the same text encoding on every host"),
)


def sandbox_env(workdir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a sandboxed command sees: built from scratch, plus ``extra``."""
    env = {}
    for variable in ENVIRONMENT:
        value = str(workdir) if variable.value == WORK_FOLDER else variable.value
        env[variable.name] = os.environ.get(variable.name, value) if variable.from_host else value
    env.update(extra or {})
    return env


def _root_folders(source: RootSource) -> list[Path]:
    """The folders one entry of :data:`ROOTS` names on this host (none where it is absent)."""
    if source.kind == "path":
        return [Path(source.name)]
    if source.kind == "python":
        return [Path(getattr(sys, source.name))]
    if source.kind == "package":
        import cuset_core

        return [Path(cuset_core.__file__).parent]
    if source.kind == "env":
        return [Path(os.environ[source.name])] if os.environ.get(source.name) else []
    found = shutil.which(source.name)
    return [Path(found).parent, Path(found).resolve().parent.parent] if found else []


def _readable_roots(extra: Sequence[Path] = ()) -> list[Path]:
    """Folders mounted read-only: those :data:`ROOTS` names on this host, and the ``extra``
    folders the caller names (the CPU tier's precompiled preludes)."""
    roots = [*(folder for source in ROOTS for folder in _root_folders(source)), *extra]
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


def _hidden(limits: SandboxLimits, roots: Sequence[Path], workdir: Path) -> list[Mount]:
    """What covers each of ``limits.hidden`` that a readable root would show (one that holds the
    work folder stays: the command needs its folder)."""
    mounts = []
    for hidden in (str(Path(p).resolve()) for p in limits.hidden):
        if not _under(hidden, roots) or _under(str(workdir), [Path(hidden)]):
            continue
        # An empty folder nobody may enter; for a file, the null device (a read gets nothing).
        mounts.append(
            Mount(hidden, "tmpfs", "hidden: an empty folder nobody may enter", perms="0000", size=4096)
            if Path(hidden).is_dir()
            else Mount(hidden, "dev-bind", "hidden: the null device, a read gets nothing", source="/dev/null")
        )
    return mounts


def _nodes(pattern: str) -> list[Path]:
    """The host's nodes the glob ``pattern`` matches, in name order."""
    return sorted(Path(pattern).parent.glob(Path(pattern).name))


def _options(mount: Mount) -> list[str]:
    """bwrap's options for one mount (``devices`` expanded beforehand)."""
    made = [*(["--perms", mount.perms] if mount.perms else []), *(["--size", str(mount.size)] if mount.size else [])]
    source = mount.source or mount.path
    if mount.how == "host":
        if os.path.islink(mount.path):
            return ["--symlink", os.readlink(mount.path), mount.path]
        return ["--ro-bind", mount.path, mount.path] if os.path.isdir(mount.path) else []
    flags: dict[str, list[str]] = {
        "ro": ["--ro-bind", source],
        "ro-try": ["--ro-bind-try", source],
        "link": ["--symlink", source],
        "dir": ["--dir"],
        "proc": ["--proc"],
        "dev": ["--dev"],
        "tmpfs": ["--tmpfs"],
        "dev-bind": ["--dev-bind", source],
    }
    return [*made, *flags[mount.how], mount.path]


def _kernel_mounts() -> list[Mount]:
    """:data:`KERNEL` for this host: its GPU nodes each, and what only a GPU needs where it has one."""
    gpu = bool(_nodes(GPU_NODES))
    mounts: list[Mount] = []
    for mount in KERNEL:
        if mount.how == "devices":
            mounts += [Mount(str(node), "dev-bind", mount.why) for node in _nodes(mount.path)]
        elif gpu or not mount.with_gpu:
            mounts.append(mount)
    return mounts


def _mounts(workdir: Path, limits: SandboxLimits, readable: Sequence[Path], argv0: str | None) -> list[Mount]:
    """Every mount of one run, in the order bwrap makes them."""
    roots = _readable_roots(readable)
    system = [Path(mount.path) for mount in SYSTEM]
    symlinks, files = _link_mounts(_interpreters(argv0), [*roots, *system], workdir)
    # bwrap would make the mount points' parents 0700, which the sandbox's uid could not pass.
    dests = (*roots, workdir, *system, *map(Path, symlinks), *map(Path, files))
    parents = {p for dest in dests for p in dest.parents if p != Path("/")}
    return [
        *(
            Mount(str(parent), "dir", "a mount point's parent the sandbox's uid can pass", perms="0755")
            for parent in sorted(parents, key=lambda p: (len(p.parts), str(p)))
            if not _under(str(parent), roots)
        ),
        *(Mount(str(root), "ro", "a readable root", source=str(root.resolve())) for root in roots),
        *SYSTEM,
        # The links on the way to the interpreter that no mount above brings (a venv made through a
        # folder of links: every side of tiers 1-3 would exit 127), and the file they end at.
        *(
            Mount(where, "link", "a link on the way to an interpreter", source=says)
            for where, says in sorted(symlinks.items())
        ),
        *(Mount(real, "ro", "the interpreter that link leads to") for real in files),
        *_kernel_mounts(),
        *_hidden(limits, roots, workdir),
        Mount(str(workdir), "tmpfs", "the work folder, capped", perms="1777", size=limits.workdir_mb << 20),
    ]


def _bwrap_args(
    workdir: Path, limits: SandboxLimits, readable: Sequence[Path] = (), argv0: str | None = None
) -> list[str]:
    """bwrap's options for one run: namespaces, the minimal root, the tmpfs work folder; the
    links on the way to ``argv0`` and the verifier's interpreter (:func:`_link_mounts`)."""
    options = [*NAMESPACES, *(AS_ROOT if os.geteuid() == 0 else AS_USER)]
    args = ["bwrap", *(arg for option in options for arg in option.args)]
    for mount in _mounts(workdir, limits, readable, argv0):
        args += _options(mount)
    return [*args, "--chdir", str(workdir), "--seccomp", str(_SECCOMP_FD)]


def _privilege_drop() -> list[str]:
    """As root, the command that becomes the sandbox's uid, with no group, no capability and
    ``no_new_privs``, before the wrapper runs; nothing otherwise (a user namespace does it)."""
    if os.geteuid() != 0:
        return []
    uid = str(SandboxSettings().uid)
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs", "--"]  # fmt: skip
