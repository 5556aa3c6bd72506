"""The sandbox's policy, pinned: for a fixed work folder, limits and set of roots, the bwrap
command line and the environment are exactly these (what the host decides, its /bin links and
its GPU nodes, is read from the host as the policy reads it). The mount points' parent folders
come parents first, then in name order."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuset_core.verify.sandbox import policy, process
from cuset_core.verify.settings import SandboxLimits

ROOTS = [Path("/cuset-pin/base"), Path("/cuset-pin/venv"), Path("/usr")]
LINKS = {"/cuset-pin/links/python3": "/cuset-pin/base/bin/python3.11"}
FILES = ["/cuset-pin/real/python3.11"]
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "nsswitch.conf", "localtime", "nvidia")
NAMESPACES = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
              "--die-with-parent", "--new-session"]  # fmt: skip
AS_ROOT = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]


@pytest.fixture
def fixed_host(monkeypatch):
    """The roots and the interpreter's links fixed; ``calls`` records what the link search got."""
    calls: list[tuple[object, ...]] = []

    def link_mounts(programs, covered, workdir):
        calls.append((list(programs), list(covered), workdir))
        return dict(LINKS), list(FILES)

    monkeypatch.setattr(policy, "_readable_roots", lambda extra=(): list(ROOTS))
    monkeypatch.setattr(policy, "_interpreters", lambda argv0: ["/cuset-pin/venv/bin/python", str(argv0)])
    monkeypatch.setattr(policy, "_link_mounts", link_mounts)
    monkeypatch.delenv("CUSET_SANDBOX_UID", raising=False)
    return calls


def _top() -> list[str]:
    """/bin, /lib, /lib64, /sbin as this host has them: a link as the same link, a folder read-only."""
    args: list[str] = []
    for name in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    return args


def _gpu() -> list[str]:
    nodes = sorted(str(node) for node in Path("/dev").glob("nvidia*"))
    args = [arg for node in nodes for arg in ("--dev-bind", node, node)]
    return args + (["--ro-bind-try", "/sys", "/sys"] if nodes else [])


def _middle() -> list[str]:
    """From the roots to /dev/shm, the same for both runs."""
    return [
        "--ro-bind", "/cuset-pin/base", "/cuset-pin/base",
        "--ro-bind", "/cuset-pin/venv", "/cuset-pin/venv",
        "--ro-bind", "/usr", "/usr",
        *_top(),
        *[arg for name in ETC for arg in ("--ro-bind-try", f"/etc/{name}", f"/etc/{name}")],
        "--symlink", "/cuset-pin/base/bin/python3.11", "/cuset-pin/links/python3",
        "--ro-bind", "/cuset-pin/real/python3.11", "/cuset-pin/real/python3.11",
        "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(64 << 20), "--tmpfs", "/dev/shm",
        *_gpu(),
    ]  # fmt: skip


def test_the_bwrap_command_line_as_root_is_pinned(fixed_host, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    workdir = Path("/cuset-pin/work")
    hidden = ("/usr/share", "/cuset-pin/venv/cuset.sqlite", "/elsewhere/secret")
    limits = SandboxLimits(workdir_mb=96, hidden=hidden)
    args = policy._bwrap_args(workdir, limits, [Path("/cuset-pin/preludes")], "nvcc")
    assert args == [
        *NAMESPACES,
        *AS_ROOT,
        "--perms", "0755", "--dir", "/cuset-pin",
        "--perms", "0755", "--dir", "/etc",
        "--perms", "0755", "--dir", "/cuset-pin/links",
        "--perms", "0755", "--dir", "/cuset-pin/real",
        *_middle(),
        "--perms", "0000", "--size", "4096", "--tmpfs", "/usr/share",
        "--dev-bind", "/dev/null", "/cuset-pin/venv/cuset.sqlite",
        "--perms", "1777", "--size", str(96 << 20), "--tmpfs", "/cuset-pin/work",
        "--chdir", "/cuset-pin/work", "--seccomp", "5",
    ]  # fmt: skip
    top = [Path(name) for name in ("/bin", "/lib", "/lib64", "/sbin")]
    etc = [Path("/etc") / name for name in ETC]
    assert fixed_host == [(["/cuset-pin/venv/bin/python", "nvcc"], [*ROOTS, *top, *etc], workdir)]


def test_the_bwrap_command_line_as_a_user_is_pinned(fixed_host, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    # A hidden folder that holds the work folder is left visible (the command needs its folder).
    workdir = Path("/cuset-pin/venv/work")
    args = policy._bwrap_args(workdir, SandboxLimits(hidden=("/cuset-pin/venv",)))
    assert args == [
        *NAMESPACES,
        "--unshare-user", "--disable-userns",
        "--perms", "0755", "--dir", "/cuset-pin",
        "--perms", "0755", "--dir", "/etc",
        "--perms", "0755", "--dir", "/cuset-pin/links",
        "--perms", "0755", "--dir", "/cuset-pin/real",
        *_middle(),
        "--perms", "1777", "--size", str(SandboxLimits().workdir_mb << 20), "--tmpfs", "/cuset-pin/venv/work",
        "--chdir", "/cuset-pin/venv/work", "--seccomp", "5",
    ]  # fmt: skip


def test_the_whole_command_drops_to_the_sandbox_uid_as_root_and_runs_the_wrapper(fixed_host, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    workdir, limits = Path("/cuset-pin/work"), SandboxLimits()
    command = process._command(["nvcc", "-c", "k.cu"], workdir, limits)
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs", "--"]  # fmt: skip
    bwrap = policy._bwrap_args(workdir, limits, (), "nvcc")
    assert command == [*bwrap, "--", *drop, "sh", "-c", process._wrapper(), "/cuset-pin/work", "nvcc", "-c", "k.cu"]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    command = process._command(["true"], workdir, limits)
    assert command[command.index("--") + 1 :] == ["sh", "-c", process._wrapper(), "/cuset-pin/work", "true"]


def test_the_environment_is_built_from_scratch(monkeypatch):
    monkeypatch.setenv("PATH", "/cuset-pin/bin:/usr/bin")
    env = policy.sandbox_env(Path("/cuset-pin/work"), {"CUDA_VISIBLE_DEVICES": "0", "LANG": "C"})
    assert list(env.items()) == [
        ("PATH", "/cuset-pin/bin:/usr/bin"),
        ("HOME", "/cuset-pin/work"),
        ("TMPDIR", "/cuset-pin/work"),
        ("USER", "cuset-sandbox"),
        ("LOGNAME", "cuset-sandbox"),
        ("LANG", "C"),
        ("LC_ALL", "C.UTF-8"),
        ("CUDA_VISIBLE_DEVICES", "0"),
    ]
    monkeypatch.delenv("PATH")
    assert policy.sandbox_env(Path("/w"))["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
