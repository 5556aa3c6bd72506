"""A hostile candidate inside the verification sandbox cannot reach anything outside its work
folder: each test runs the attack and fails if it works. They run as root (the sandbox then
drops to its own uid) and as an unprivileged user (the sandbox is a user namespace); .ci/run
runs this folder both ways."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cuset_core.verify.sandbox import isolation, run_sandboxed
from cuset_core.verify.settings import SandboxLimits

LIMITS = SandboxLimits(wall_s=60, cpu_s=30, memory_mb=1024, max_processes=32)

pytestmark = pytest.mark.skipif(
    not isolation().available, reason=f"the sandbox cannot isolate here: {isolation().reason}"
)


def run_python(code: str, workdir: Path, limits: SandboxLimits = LIMITS):
    workdir.mkdir(exist_ok=True)
    return run_sandboxed([sys.executable, "-c", code], workdir=workdir, limits=limits)


def attempt(statement: str) -> str:
    """Python that runs ``statement`` and prints ``WORKED`` or the error's class name."""
    return f"try:\n    {statement}\n    print('WORKED')\nexcept Exception as exc:\n    print(type(exc).__name__)\n"


def test_the_candidate_runs_as_a_non_root_user_without_capabilities(tmp_path):
    code = "import os\nprint(os.getuid(), os.geteuid())\nprint(open('/proc/self/status').read())"
    outcome = run_python(code, tmp_path / "w")
    ids, status = outcome.stdout.split("\n", 1)
    if os.geteuid() == 0:
        assert "0" not in ids.split()
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["CapEff"].strip() == fields["CapBnd"].strip() == "0000000000000000"
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"


def test_etc_shadow_and_the_hosts_private_folders_are_not_there(tmp_path):
    paths = ("/etc/shadow", "/etc/passwd", "/run", "/home", "/root/.ssh", "/var")
    probe = "import os\n" + "".join(f"print({path!r}, os.path.exists({path!r}))\n" for path in paths)
    outcome = run_python(probe, tmp_path / "w")
    assert outcome.ok, outcome.stderr
    assert all(line.endswith("False") for line in outcome.stdout.splitlines()), outcome.stdout


def test_other_jobs_folders_under_tmp_cannot_be_read(tmp_path):
    with tempfile.TemporaryDirectory(prefix="cuset-cpu-") as other:
        (Path(other) / "candidate.py").write_text("another user's kernel")
        code = "import os\nprint(sorted(os.listdir('/tmp')))\n" + attempt(
            f"open({str(Path(other) / 'candidate.py')!r}).read()"
        )
        outcome = run_python(code, tmp_path / "w")
    listing, opened = outcome.stdout.splitlines()
    assert Path(other).name not in listing
    assert opened == "FileNotFoundError"


def test_no_unix_socket_can_be_reached_or_made(tmp_path):
    server_dir = Path(tempfile.mkdtemp(prefix="cuset-sock-"))
    path = server_dir / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    targets = [str(path), "/run/postgresql/.s.PGSQL.5432"]
    code = (
        "import socket\n"
        + "".join(attempt(f"socket.socket(socket.AF_UNIX).connect({t!r})") for t in targets)
        + attempt("socket.socket(socket.AF_UNIX).connect('\\0cuset-abstract')")
    )
    try:
        outcome = run_python(code, tmp_path / "w")
    finally:
        server.close()
        path.unlink()
        server_dir.rmdir()
    assert outcome.stdout.split() == ["PermissionError"] * 3


def test_no_tcp_connection_even_to_a_listening_local_port(tmp_path):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    code = "import socket\n" + attempt(f"socket.create_connection(('127.0.0.1', {port}), timeout=3)")
    outcome = run_python(code, tmp_path / "w")
    # A connection the kernel completed waits in the listen backlog whether or not anyone
    # accepted it, so one non-blocking accept after the run sees it.
    server.setblocking(False)
    try:
        connection, _ = server.accept()
        connection.close()
        connected = True
    except BlockingIOError:
        connected = False
    finally:
        server.close()
    assert outcome.stdout.strip() in {"PermissionError", "ConnectionRefusedError", "OSError"}
    assert not connected


def test_no_namespace_mount_ptrace_bpf_keyring_or_io_uring(tmp_path):
    calls = {  # x86-64 syscall numbers: what libc would call
        "unshare(CLONE_NEWUSER)": "libc.unshare(0x10000000)",
        "unshare(CLONE_NEWNS)": "libc.unshare(0x00020000)",
        "clone(CLONE_NEWUSER)": "libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)",
        "mount": "libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)",
        "ptrace(PTRACE_ATTACH, 1)": "libc.ptrace(16, 1, 0, 0)",
        "bpf": "libc.syscall(321, 0, 0, 0)",
        "add_key": "libc.syscall(248, b'user', b'k', b'v', 1, -2)",
        "keyctl": "libc.syscall(250, 0, -1, 0, 0, 0)",
        "userfaultfd": "libc.syscall(323, 0)",
        "io_uring_setup": "libc.syscall(425, 1, 0)",
    }
    code = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n" + "".join(
        f"print({name!r}, {call}, ctypes.get_errno())\n" for name, call in calls.items()
    )
    outcome = run_python(code, tmp_path / "w")
    assert outcome.ok, outcome.stderr
    results = {line.rsplit(" ", 2)[0]: line.rsplit(" ", 2)[1:] for line in outcome.stdout.splitlines()}
    assert set(results) == set(calls)
    for name, (returned, _errno) in results.items():
        assert returned == "-1", f"{name} succeeded inside the sandbox"


def test_the_unshare_tool_cannot_make_a_user_namespace(tmp_path):
    code = "import os\nraise SystemExit(os.waitstatus_to_exitcode(os.system('unshare --user --map-root-user id -u')))"
    outcome = run_python(code, tmp_path / "w")
    assert outcome.returncode != 0
    assert "0\n" not in outcome.stdout
    assert "Operation not permitted" in outcome.stderr


def test_the_work_folder_is_capped_two_files_of_200_mib_cannot_both_be_written(tmp_path):
    limits = LIMITS.model_copy(update={"file_size_mb": 256, "workdir_mb": 256, "memory_mb": 2048})
    code = (
        "chunk = b'x' * (1 << 20)\nfor name in ('a', 'b'):\n    with open(name, 'wb') as f:\n"
        "        for _ in range(200):\n            f.write(chunk)\n    print('wrote', name, flush=True)\n"
    )
    outcome = run_python(code, tmp_path / "w", limits)
    assert outcome.stdout == "wrote a\n"
    assert "No space left on device" in outcome.stderr
    assert outcome.limit_hit == "file_size"
    written = sum(f.stat().st_size for f in (tmp_path / "w").iterdir())
    assert written <= 256 << 20


def test_no_process_survives_the_check_not_even_a_daemon(tmp_path):
    marker = f"sleep {os.getpid() % 1000 + 7000}"
    code = (
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execvp('sleep', {marker.split()!r})\n    os._exit(0)\nprint('daemonised')\n"
    )
    outcome = run_python(code, tmp_path / "w")
    assert outcome.stdout == "daemonised\n"
    time.sleep(0.3)
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert marker not in running


def test_a_link_left_in_the_work_folder_is_not_followed_by_the_copy_back(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    code = (
        "import os\nos.symlink('/etc/hostname', 'result.json')\nos.symlink(" + repr(str(secret)) + ", 'link')\n"
        "os.mkfifo('fifo')\nopen('plain', 'w').write('ok')\n"
    )
    outcome = run_python(code, tmp_path / "w")
    assert outcome.ok, outcome.stderr
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["plain"]
    assert secret.read_text() == "host secret"


def test_an_include_of_etc_passwd_quotes_nothing_of_it(tmp_path):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "unit.cpp").write_text('#include "/etc/passwd"\nint main() {}\n')
    outcome = run_sandboxed(["g++", "-fsyntax-only", "unit.cpp"], workdir=tmp_path / "w", limits=LIMITS)
    assert not outcome.ok
    assert "No such file or directory" in outcome.stderr
    for line in Path("/etc/passwd").read_text().splitlines()[:3]:
        assert line.split(":")[0] + ":x:" not in outcome.stderr


@pytest.mark.nvcc
def test_tier_1_refuses_includes_outside_the_include_folders_with_their_line(tmp_path):
    from cuset_core.verify.candidate import parse_candidate
    from cuset_core.verify.compile import compile_candidate
    from cuset_core.verify.settings import VerifySettings

    sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
    from verify_cases import GOOD, fenced, line_of

    passwd = Path("/etc/passwd").read_text().splitlines()[0]
    attacks = ('#include "/etc/passwd"', "#include <../../../../etc/passwd>", "#define P </etc/passwd>\n#include P")
    for include in attacks:
        text = fenced(GOOD.replace("#include <torch/extension.h>", include))
        report = compile_candidate(parse_candidate(text), VerifySettings(), tmp_path)
        assert not report.ok
        assert passwd not in report.log and passwd.split(":")[0] + ":x:" not in report.log
        errors = [d for d in report.diagnostics if d.severity == "error"]
        assert "only headers of the include folders may be included" in errors[0].message
        assert errors[0].line == line_of(text, include.splitlines()[-1])


def test_the_verification_cache_can_be_neither_read_nor_poisoned(tmp_path, monkeypatch):
    from cuset_core.paths import CorePaths

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = CorePaths().verify_results
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "entry.json").write_text('{"verdict": "value_mismatch"}')
    code = attempt(f"open({str(cache / 'entry.json')!r}, 'w').write('{{\"verdict\": \"pass\"}}')")
    outcome = run_python(code, tmp_path / "w")
    assert outcome.stdout.strip() in {"FileNotFoundError", "PermissionError", "OSError"}
    assert (cache / "entry.json").read_text() == '{"verdict": "value_mismatch"}'


def test_no_other_process_and_so_no_others_environment_is_visible(tmp_path, monkeypatch):
    monkeypatch.setenv("CUSET_TEST_SECRET", "hunter2")
    code = (
        "import glob\nprint(len(glob.glob('/proc/[0-9]*')))\n"
        "found = []\nfor f in glob.glob('/proc/*/environ'):\n    try:\n"
        "        found += [f] if b'hunter2' in open(f, 'rb').read() else []\n    except OSError:\n        pass\n"
        "print(found)\n"
    )
    outcome = run_python(code, tmp_path / "w")
    assert outcome.ok, outcome.stderr
    processes, found = outcome.stdout.splitlines()
    assert int(processes) <= 4  # its own PID namespace: bwrap's init, the wrapper, python
    assert found == "[]"
