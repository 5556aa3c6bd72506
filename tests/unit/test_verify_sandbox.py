"""The sandbox stops or contains hostile candidate processes and reports which limit held."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from verify_cases import eventually

from cuset_core.verify import sandbox
from cuset_core.verify.sandbox import run_sandboxed
from cuset_core.verify.settings import SandboxLimits

LIMITS = SandboxLimits(wall_s=10, cpu_s=5, memory_mb=512, max_processes=32, file_size_mb=4)


def run_python(code: str, workdir: Path, limits: SandboxLimits = LIMITS, **kwargs):
    workdir.mkdir(exist_ok=True)
    return run_sandboxed([sys.executable, "-c", code], workdir=workdir, limits=limits, **kwargs)


def test_a_well_behaved_command_passes_with_its_output(tmp_path):
    outcome = run_python("import os; print('hello', os.getcwd())", tmp_path / "w")
    assert outcome.ok
    assert outcome.stdout == f"hello {(tmp_path / 'w').resolve()}\n"
    assert (outcome.returncode, outcome.signal, outcome.limit_hit, outcome.timed_out) == (0, None, None, False)


def test_stdin_is_passed_through(tmp_path):
    outcome = run_python("import sys; print(sys.stdin.read().upper())", tmp_path / "w", stdin=b"abc")
    assert outcome.stdout == "ABC\n"


# What a harness started early does (harness_side.run_side --late): work first, then its late files.
LATE_READER = """
import sys, time
from pathlib import Path
from cuset_core.verify.sandbox import unpack_files
print("started with", sorted(p.name for p in Path.cwd().iterdir()), flush=True)
unpack_files(sys.stdin.buffer.read(), Path.cwd())
print("then got", sorted(p.name for p in Path.cwd().iterdir()), flush=True)
Path("answer.txt").write_text(Path("late.txt").read_text().upper())
"""


def start_python(code: str, workdir: Path, limits: SandboxLimits = LIMITS):
    workdir.mkdir(exist_ok=True)
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return sandbox.start_sandboxed([sys.executable, "-c", code], workdir=workdir, limits=limits, env=env)


def test_a_command_started_early_gets_the_files_written_after_it_started(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "early.txt").write_text("there at the start")
    with start_python(LATE_READER, work) as started:
        time.sleep(1.5)  # the command is running meanwhile, waiting on its stdin
        (work / "late.txt").write_text("written later")
        outcome = started.finish()
    assert outcome.ok, outcome.stderr
    # It did start before the late file existed, and got it afterwards.
    assert outcome.stdout.splitlines()[:2] == ["started with ['early.txt']", "then got ['early.txt', 'late.txt']"]
    assert (work / "answer.txt").read_text() == "WRITTEN LATER"  # copied back as from any run


def test_the_wall_clock_limit_of_a_command_started_early_counts_from_its_files(tmp_path):
    limits = LIMITS.model_copy(update={"wall_s": 2.0})
    work = tmp_path / "w"
    with start_python(LATE_READER + "time.sleep(60)", work, limits) as started:
        time.sleep(3.0)  # longer than the limit, before the files: not counted
        (work / "late.txt").write_text("x")
        outcome = started.finish()
    assert "then got ['late.txt']" in outcome.stdout  # it got its files, then overslept
    assert (outcome.timed_out, outcome.limit_hit) == (True, "wall")
    assert 1.5 < outcome.wall_s < 5


def test_a_command_started_early_and_never_finished_is_killed(tmp_path):
    marker = f"abandoned_{os.getpid()}_{time.monotonic_ns()}"
    code = f"{marker} = 1\nimport time\ntime.sleep(60)"
    with start_python(code, tmp_path / "w") as started:
        assert eventually(lambda: any(marker in line for line in _running_commands(exact=True)), 20)
    assert eventually(lambda: marker not in _running_commands(), 10)
    with pytest.raises(RuntimeError, match="already finished or abandoned"):
        started.finish()


def test_a_sandbox_abandoned_while_it_is_still_starting_leaves_nothing_running(tmp_path):
    # bwrap arms its child's parent-death signal just after cloning it: a kill in that gap once
    # left the child running the command for its whole sleep (seen under load, unprivileged).
    marker = f"starting_{os.getpid()}_{time.monotonic_ns()}"
    code = f"{marker} = 1\nimport time\ntime.sleep(60)"
    for attempt in range(12):
        with start_python(code, tmp_path / f"w{attempt}"):
            time.sleep(attempt * 0.002)  # abandoned at different points of its setting up
    assert eventually(lambda: marker not in _running_commands(), 10)


# In a process of its own: pytest holds descriptors 3-5 for its whole run, which hid the fault.
SIDE_BY_SIDE = """
import os, sys, threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from cuset_core.verify.sandbox import run_sandboxed
from cuset_core.verify.settings import SandboxLimits

root, stop = Path(sys.argv[1]), threading.Event()

def churn():
    while not stop.is_set():
        os.close(os.open(os.devnull, os.O_RDONLY))

def start(index):
    (root / str(index)).mkdir()
    try:
        limits = SandboxLimits(wall_s=60, cpu_s=30, memory_mb=512)
        return run_sandboxed([sys.executable, "-c", "print('up')"], workdir=root / str(index), limits=limits).stdout
    except Exception as exc:
        return repr(exc)

churning = [threading.Thread(target=churn) for _ in range(2)]
for thread in churning:
    thread.start()
with ThreadPoolExecutor(max_workers=6) as threads:
    said = list(threads.map(start, range(48)))
stop.set()
print([text for text in said if text != "up\\n"])
"""


def test_sandboxes_started_from_several_threads_at_once_all_start(tmp_path):
    # The verifier starts tier 2's reference side while tier 1 compiles: sandboxes start side by
    # side while other threads open and close files, so the low descriptor numbers come and go.
    # Popen's pass_fds once failed there ("could not start bwrap: [Errno 9] Bad file
    # descriptor"), and the candidate's check became internal_error.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", SIDE_BY_SIDE, str(tmp_path)], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout[-2000:]


NICE_VERIFIER = """
import sys
from pathlib import Path
from cuset_core.verify.sandbox import run_sandboxed
from cuset_core.verify.settings import SandboxLimits

Path("/proc/self/autogroup").write_text("19")
Path(sys.argv[1]).mkdir()
outcome = run_sandboxed(["cat", "/proc/self/autogroup"], workdir=Path(sys.argv[1]), limits=SandboxLimits(wall_s=60))
print(outcome.stdout.split()[-1] if outcome.ok else outcome)
"""


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="the kernel has no autogroups")
def test_a_sandbox_runs_at_its_verifiers_scheduling_group_niceness(tmp_path):
    # A verifier at nice 19 in a session of its own (an experiment, a fidelity run) must not take
    # the CPU from other sessions through its sandboxes, each a new session (bwrap --new-session).
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", NICE_VERIFIER, str(tmp_path / "w")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        start_new_session=True,  # its own scheduling group, so the test's own stays as it is
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "19", done.stdout[-2000:]


def test_no_descriptor_of_the_verifier_reaches_the_command(tmp_path):
    leaked = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(leaked, True)
    try:
        outcome = run_python("import os; print(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))", tmp_path / "w")
    finally:
        os.close(leaked)
    assert outcome.ok
    assert eval(outcome.stdout) == [0, 1, 2, 3], "stdin, stdout, stderr and the listing's own descriptor"


def test_a_cancelled_command_is_killed_and_nothing_of_it_is_kept(tmp_path):
    # How the verifier drops tier 2's reference side, started while tier 1 compiles, once tier 1
    # has failed the candidate.
    marker = f"cancelled_{os.getpid()}_{time.monotonic_ns()}"
    code = f"{marker} = 1\nimport time\nopen('begun.txt', 'w').close()\ntime.sleep(60)"
    cancel = threading.Event()
    cancelling = threading.Thread(target=lambda: eventually(lambda: marker in _running_commands(), 30) and cancel.set())
    cancelling.start()
    with pytest.raises(sandbox.SandboxCancelled):
        run_python(code, tmp_path / "w", LIMITS.model_copy(update={"wall_s": 120.0}), cancel=cancel)
    cancelling.join()
    assert cancel.is_set()
    assert eventually(lambda: marker not in _running_commands(), 10)
    assert not (tmp_path / "w" / "begun.txt").exists(), "a cancelled command's files are not copied back"


def test_a_command_that_ends_before_its_cancel_is_reported_as_usual(tmp_path):
    cancel = threading.Event()
    outcome = run_python("print('done')", tmp_path / "w", cancel=cancel)
    cancel.set()
    assert outcome.ok and outcome.stdout == "done\n"


def test_a_sleeping_command_is_killed_at_the_wall_clock_limit(tmp_path):
    limits = LIMITS.model_copy(update={"wall_s": 1.0})
    start = time.monotonic()
    outcome = run_python("import time; time.sleep(60)", tmp_path / "w", limits)
    assert time.monotonic() - start < 5
    assert (outcome.timed_out, outcome.limit_hit, outcome.returncode) == (True, "wall", None)


def test_an_infinite_loop_is_stopped_by_the_cpu_limit(tmp_path):
    limits = LIMITS.model_copy(update={"cpu_s": 1})
    outcome = run_python("while True: pass", tmp_path / "w", limits)
    assert outcome.limit_hit == "cpu"
    assert not outcome.timed_out


def test_a_fork_bomb_is_contained_and_reported(tmp_path):
    limits = LIMITS.model_copy(update={"wall_s": 5.0})
    # A marker unique to this test run: other processes on the machine may hold "while True" too.
    marker = f"fork_bomb_{os.getpid()}_{time.monotonic_ns()}"
    bomb = f"import os\n{marker} = 1\nwhile True:\n    os.fork()"
    start = time.monotonic()
    outcome = run_python(bomb, tmp_path / "w", limits)
    assert time.monotonic() - start < 8
    assert outcome.limit_hit == "processes"
    # Nothing of it survives the sandbox.
    assert marker not in _running_commands()


def _running_commands(exact: bool = False) -> str | list[str]:
    """Every process's command line, as one text to search; with ``exact``, as a list, so that a
    marker matches only a process whose whole command line it is."""
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip())
            except OSError:
                continue
    return lines if exact else "\n".join(lines)


def test_an_unbounded_allocation_hits_the_memory_limit(tmp_path):
    outcome = run_python("x = []\nwhile True:\n    x.append(bytearray(10**7))", tmp_path / "w")
    assert outcome.limit_hit == "memory"
    assert "MemoryError" in outcome.stderr


def test_a_huge_file_hits_the_file_size_limit(tmp_path):
    outcome = run_python("open('big', 'wb').write(b'0' * (8 << 20))", tmp_path / "w")
    assert outcome.limit_hit == "file_size"
    assert (tmp_path / "w" / "big").stat().st_size <= 4 << 20


def test_no_network_even_to_localhost(tmp_path):
    code = (
        "import socket\n"
        "try:\n    socket.create_connection(('127.0.0.1', 5432), timeout=2)\n"
        "except OSError as exc:\n    print('refused', exc.errno)\n"
    )
    outcome = run_python(code, tmp_path / "w")
    assert outcome.stdout.startswith("refused")


def test_the_parents_secrets_are_not_visible(tmp_path, monkeypatch):
    monkeypatch.setenv("CUSET_DATABASE_URL", "postgresql://user:secret@db/cuset")
    code = "import os; print(sorted(k for k in os.environ if 'CUSET' in k or 'DATABASE' in k))"
    outcome = run_python(code, tmp_path / "w", env={"EXTRA": "1"})
    assert outcome.stdout == "[]\n"
    home = run_python(
        "import os; print(os.environ['HOME'], os.environ['TMPDIR'], os.environ['EXTRA'])",
        tmp_path / "w",
        env={"EXTRA": "1"},
    )
    workdir = str((tmp_path / "w").resolve())
    assert home.stdout == f"{workdir} {workdir} 1\n"


def test_writes_outside_the_workdir_fail_where_the_filesystem_is_isolated(tmp_path):
    import cuset_core

    outside = tmp_path / "outside"
    outside.mkdir()
    mounted = Path(cuset_core.__file__).parent  # visible to the command, read-only
    code = f"import os; os.system('touch {outside / 'pwned'}'); os.system('touch {mounted / 'pwned'}')"
    outcome = run_python(code, tmp_path / "w")
    if "min_root" not in outcome.isolation:
        pytest.skip("no isolation here: writes outside the workdir are not enforced")
    assert not (outside / "pwned").exists() and not (mounted / "pwned").exists()
    assert "No such file or directory" in outcome.stderr  # the caller's other folders are not there
    assert "Read-only file system" in outcome.stderr


def test_background_children_do_not_outlive_the_sandbox(tmp_path):
    marker = f"sleep {os.getpid() % 1000 + 3000}"
    outcome = run_python(f"import os; os.system('{marker} &'); print('started')", tmp_path / "w")
    assert outcome.stdout == "started\n"
    time.sleep(0.2)
    assert marker not in _running_commands()


def test_a_crash_reports_its_signal(tmp_path):
    outcome = run_python("import os; os.abort()", tmp_path / "w")
    assert (outcome.returncode, outcome.signal, outcome.limit_hit) == (-6, 6, None)


def test_a_missing_program_is_reported_not_raised(tmp_path):
    outcome = run_sandboxed(["/nonexistent/cc"], workdir=tmp_path, limits=LIMITS)
    assert not outcome.ok


def test_opted_out_of_isolation_limits_and_timeouts_still_hold(tmp_path, monkeypatch):
    from cuset_core.verify import sandbox
    from cuset_core.verify.sandbox import cgroups

    monkeypatch.setattr(sandbox, "isolation", lambda: sandbox.Isolation(False, "no bwrap in this test"))
    monkeypatch.setenv("CUSET_SANDBOX_ALLOW_UNISOLATED", "1")
    # Where run_sandboxed's start looks it up: the package.
    monkeypatch.setattr(sandbox, "_make_cgroups", lambda limits: cgroups._Cgroups(None, None))
    assert run_python("print('plain')", tmp_path / "w").stdout == "plain\n"
    limits = LIMITS.model_copy(update={"wall_s": 1.0})
    slept = run_python("import time; time.sleep(60)", tmp_path / "w", limits)
    assert (slept.timed_out, slept.isolation) == (True, ())
    assert run_python("x = bytearray(1 << 30)", tmp_path / "w").limit_hit == "memory"


def test_memory_is_capped_across_processes_where_a_memory_cgroup_exists(tmp_path):
    code = (
        "import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n        break\n"
        "x = b'x' * (250 << 20)\ntime.sleep(1)\n"
    )
    outcome = run_python(code, tmp_path / "w")  # 4 x 250 MiB > 512 MiB in all, < 512 MiB each
    if "memory_cgroup" not in outcome.isolation:
        pytest.skip("no memory cgroup here: memory is limited per process only")
    assert outcome.limit_hit == "memory"


def test_dev_holds_only_harmless_nodes_and_proc_sys_cannot_be_written(tmp_path):
    code = (
        "import os\nprint(sorted(d for d in os.listdir('/dev') if not d.startswith('nvidia')))\n"
        "try:\n    open('/proc/sys/kernel/domainname', 'w').write('pwned')\n    print('written')\n"
        "except OSError as exc:\n    print(type(exc).__name__)\n"
    )
    outcome = run_python(code, tmp_path / "w")
    if "min_root" not in outcome.isolation:
        pytest.skip("no isolation here")
    devices, proc_sys = outcome.stdout.splitlines()
    expected = [
        "core",
        "fd",
        "full",
        "null",
        "ptmx",
        "pts",
        "random",
        "shm",
        "stderr",
        "stdin",
        "stdout",
        "tty",
        "urandom",
        "zero",
    ]
    assert devices == str(expected)
    assert proc_sys == "PermissionError"


def test_the_sandbox_dies_with_the_verifier_that_started_it(tmp_path):
    import subprocess

    marker = f"sleep {os.getpid() % 1000 + 5000}"
    script = (
        "import sys\nfrom pathlib import Path\nfrom cuset_core.verify.sandbox import run_sandboxed\n"
        "from cuset_core.verify.settings import SandboxLimits\n"
        f"run_sandboxed({marker.split()!r}, workdir=Path(sys.argv[1]), limits=SandboxLimits(wall_s=600))\n"
    )
    (tmp_path / "w").mkdir()
    verifier = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "w")], cwd=Path(__file__).parents[2])
    # Ready when the sandboxed command itself runs: bwrap's own command line holds the marker
    # from its start, before it has set anything up.
    assert eventually(lambda: marker in _running_commands(exact=True), seconds=30)
    verifier.kill()
    verifier.wait()
    # bwrap, the sandbox's init and the command, not only the command: nothing is left.
    assert eventually(lambda: marker not in _running_commands(), seconds=10)


def test_cgroups_left_by_a_dead_verifier_are_removed_by_the_next_run(tmp_path):
    from cuset_core.verify.sandbox import cgroups

    parent = cgroups._own_cgroup("pids")
    if parent is None or not os.access(parent, os.W_OK) or os.geteuid() != 0:
        pytest.skip("no writable pids cgroup here")
    orphan = parent / f"{cgroups._CGROUP_PREFIX}999999999-deadbeef"  # no such PID
    orphan.mkdir()
    run_python("pass", tmp_path / "w")
    assert not orphan.exists()
    assert not [g for g in parent.glob(f"{cgroups._CGROUP_PREFIX}{os.getpid()}-*")]


def test_hidden_folders_and_files_are_invisible_to_the_command(tmp_path):
    from cuset_core.verify.sandbox import isolation

    if not isolation().available:
        pytest.skip(f"no isolation here ({isolation().reason}): hiding needs it")
    # Inside a folder the sandbox mounts (one its caller names, as tier 2 names its preludes), as
    # an artifact root inside the venv's or the toolkit's folder would be.
    shared = tmp_path / "cache" / "cuset" / "cpu_pch"
    secrets_dir = shared / "artifacts"
    secrets_dir.mkdir(parents=True)
    (secrets_dir / "adapter.bin").write_text("weights")
    database = shared / "cuset.sqlite"
    database.write_text("rows")
    hiding = LIMITS.model_copy(update={"hidden": (str(secrets_dir), str(database))})
    probe = f"import os\nprint(os.access({str(secrets_dir)!r}, os.R_OK))\nprint(repr(open({str(database)!r}).read()))"
    outcome = run_python(probe, tmp_path / "w", hiding, readable=[shared])
    assert outcome.ok, outcome.stderr
    assert outcome.stdout == "False\n''\n"
    # Outside the sandbox nothing changed.
    assert database.read_text() == "rows" and (secrets_dir / "adapter.bin").exists()


def test_a_failed_set_up_step_aborts_the_run_before_the_command(tmp_path, monkeypatch):
    from cuset_core.verify import sandbox
    from cuset_core.verify.sandbox import policy

    if not sandbox.isolation().available:
        pytest.skip(f"no isolation here ({sandbox.isolation().reason})")
    real_roots = policy._readable_roots()
    monkeypatch.setattr(policy, "_readable_roots", lambda extra=(): [*real_roots, tmp_path / "vanished"])
    (tmp_path / "w").mkdir()
    with pytest.raises(sandbox.SandboxSetupError, match="vanished"):
        run_sandboxed(["sh", "-c", "echo ran > ran"], workdir=tmp_path / "w", limits=LIMITS)
    assert not (tmp_path / "w" / "ran").exists()


# ---------------------------------------------------------------- copying the work folder back

SYSTEM_PYTHON = Path("/usr/bin/python3.11")  # Debian 12's: 3.11.2, before tarfile's data filter


def _hostile_archive() -> bytes:
    """A tar archive as a hostile command could leave it: a plain file, a setuid world-writable
    script, and members that must never land (a symlink, a device, ``..`` and absolute names)."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:

        def add(name: str, data: bytes = b"", **fields) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            for key, value in fields.items():
                setattr(info, key, value)
            archive.addfile(info, io.BytesIO(data))

        add("out", type=tarfile.DIRTYPE, mode=0o777)
        add("out/result.txt", b"kept")
        add("run.sh", b"#!/bin/sh\n", mode=0o6777)
        add("link", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        add("tty", type=tarfile.CHRTYPE, devmajor=5, devminor=0)
        add("../escaped.txt", b"out")
        add("/tmp/cuset-absolute-member.txt", b"out")
    return buffer.getvalue()


@pytest.mark.parametrize("python", ["venv", "system"])
def test_copying_back_a_tar_keeps_data_only_on_every_python_3_11(tmp_path, python):
    """``unpack_files`` runs where tarfile has the ``data`` filter (3.11.4+) and where it has not
    (3.11.0-3.11.3, e.g. Debian 12's /usr/bin/python3.11): the same files land, the same refused."""
    import inspect
    import subprocess

    from cuset_core.verify.sandbox import transfer

    interpreter = sys.executable
    if python == "system":
        if not SYSTEM_PYTHON.exists():
            pytest.skip(f"{SYSTEM_PYTHON} is absent")
        version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:3])"], capture_output=True)
        if eval(version.stdout) >= (3, 11, 4):  # noqa: S307 - a tuple the interpreter printed
            pytest.skip(f"{SYSTEM_PYTHON} is {version.stdout.decode().strip()}: it has the data filter")
        interpreter = str(SYSTEM_PYTHON)
    folder = tmp_path / "work"
    folder.mkdir()
    (tmp_path / "archive.tar").write_bytes(_hostile_archive())
    # The two functions alone: the system interpreter has none of the project's dependencies.
    script = "\n".join(
        [
            "import io, os, shutil, sys, tarfile",
            "from pathlib import Path",
            inspect.getsource(transfer.unpack_files),
            inspect.getsource(transfer._extract),
            "unpack_files(Path(sys.argv[1]).read_bytes(), Path(sys.argv[2]))",
        ]
    )
    subprocess.run([interpreter, "-c", script, tmp_path / "archive.tar", folder], check=True)
    assert sorted(str(path.relative_to(folder)) for path in folder.rglob("*")) == ["out", "out/result.txt", "run.sh"]
    assert (folder / "out" / "result.txt").read_bytes() == b"kept"
    assert (folder / "run.sh").stat().st_mode & 0o7777 == 0o755  # no setuid/setgid, no group/other write
    assert not (tmp_path / "escaped.txt").exists() and not Path("/tmp/cuset-absolute-member.txt").exists()


def test_a_folder_outside_the_toolchain_is_mounted_only_when_the_caller_names_it_and_read_only(tmp_path):
    from cuset_core.verify.sandbox import isolation

    if not isolation().available:
        pytest.skip(f"no isolation here ({isolation().reason}): mounts need it")
    preludes = tmp_path / "preludes"
    preludes.mkdir()
    (preludes / "prelude.h").write_text("// precompiled")
    probe = (
        f"import os\nprint(os.path.exists({str(preludes)!r}))\n"
        f"try:\n    open({str(preludes / 'x')!r}, 'w')\n    print('wrote')\nexcept OSError:\n    print('read-only')\n"
    )
    unnamed = run_python(probe, tmp_path / "a")
    named = run_python(probe, tmp_path / "b", readable=[preludes])
    assert unnamed.stdout.splitlines()[0] == "False"
    assert named.stdout.splitlines() == ["True", "read-only"]
    assert sorted(p.name for p in preludes.iterdir()) == ["prelude.h"]


def test_a_failed_isolation_probe_is_tried_again_and_a_success_is_kept(monkeypatch):
    results = [sandbox.Isolation(False, "bubblewrap (bwrap) is not installed"), sandbox.Isolation(True)]
    probes = []
    monkeypatch.setattr(sandbox, "probe_isolation", lambda: probes.append(1) or results[len(probes) - 1])
    monkeypatch.setattr(sandbox, "_last_probe", {})
    assert not sandbox.isolation().available
    assert not sandbox.isolation().available and len(probes) == 1  # within REPROBE_FAILURE_S: the same answer
    monkeypatch.setattr(sandbox, "REPROBE_FAILURE_S", 0.0)
    assert sandbox.isolation().available and len(probes) == 2  # bubblewrap was installed meanwhile
    assert sandbox.isolation().available and len(probes) == 2  # a success is kept
