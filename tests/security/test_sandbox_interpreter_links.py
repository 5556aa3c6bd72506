"""The sandbox runs an interpreter whatever chain of links leads to it (issue 50, item 1).

A venv made with a Python reached through a link in another folder (a folder of links, a
user's ``~/bin``, ``/etc/alternatives``) has its ``bin/python`` point into that folder. The
sandbox mounts the venv and the base installation; before, not the folder in between, so every
tier-2 side exited 127 ("python: not found") and even the reference got ``internal_error``.
Each test builds a real venv through such a chain and runs it in the real sandbox; the suite
runs as root and, through scripts/test_unprivileged.sh, as an unprivileged user.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from cuset_core.verify.readiness import Readiness, probe_tier2
from cuset_core.verify.sandbox import isolation, link_chain, run_sandboxed
from cuset_core.verify.settings import SandboxLimits

LIMITS = SandboxLimits(wall_s=60, cpu_s=30, memory_mb=1024, max_processes=32)
REAL_PYTHON = os.path.realpath(sys.executable)  # the installation this venv's Python comes from


def test_a_chain_is_followed_step_by_step_through_relative_links_folder_links_and_links_to_links(tmp_path):
    real = tmp_path / "real" / "bin"
    real.mkdir(parents=True)
    (real / "py").write_text("")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "folder").symlink_to("../real")  # a link to a folder, relative
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "first").symlink_to("../a/folder/bin/py")  # through the folder link
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "second").symlink_to(tmp_path / "b" / "first")  # a link to a link, absolute
    links, end = link_chain(tmp_path / "c" / "second")
    base = str(tmp_path.resolve())
    assert links == [
        (f"{base}/c/second", str(tmp_path / "b" / "first")),
        (f"{base}/b/first", "../a/folder/bin/py"),
        (f"{base}/a/folder", "../real"),
    ]
    assert end == f"{base}/real/bin/py" == os.path.realpath(tmp_path / "c" / "second")


def test_a_loop_of_links_ends_the_walk(tmp_path):
    (tmp_path / "x").symlink_to(tmp_path / "y")
    (tmp_path / "y").symlink_to(tmp_path / "x")
    links, _ = link_chain(tmp_path / "x")
    assert len(links) == 40


def _link_folder(tmp_path: Path) -> Path:
    """``links/python3 -> the real interpreter``, beside a file the sandbox must not show."""
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "python3").symlink_to(REAL_PYTHON)
    (tmp_path / "links" / "private.txt").write_text("not for candidates")
    return tmp_path / "links" / "python3"


def _alternatives(tmp_path: Path) -> Path:
    """Two steps, as Debian's alternatives: ``alt/python -> ../etc-alternatives/python -> real``."""
    (tmp_path / "etc-alternatives").mkdir()
    (tmp_path / "etc-alternatives" / "python").symlink_to(REAL_PYTHON)
    (tmp_path / "alt").mkdir()
    (tmp_path / "alt" / "python").symlink_to("../etc-alternatives/python")
    return tmp_path / "alt" / "python"


def _folder_link(tmp_path: Path) -> Path:
    """A link to the installation's folder, not to the file: ``pybin -> real/bin``."""
    (tmp_path / "pybin").symlink_to(os.path.dirname(REAL_PYTHON))
    return tmp_path / "pybin" / os.path.basename(REAL_PYTHON)


def make_venv(tmp_path: Path, python: Path, with_project: bool = False) -> Path:
    """A venv made by running ``python -m venv`` through the link ``python``, so the venv's
    interpreter points at the link; ``with_project``: it also sees the project's venv packages
    (torch, pydantic, ...) through a .pth file, as ``--system-site-packages`` would."""
    venv = tmp_path / "venv"
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    if with_project:
        site = next((venv / "lib").glob("python*/site-packages"))
        (site / "project.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.fixture
def isolated():
    if not isolation().available:
        pytest.skip(f"no isolation here ({isolation().reason}): mounts need it")


@pytest.mark.parametrize("chain", [_link_folder, _alternatives, _folder_link], ids=lambda f: f.__name__.strip("_"))
def test_a_venv_made_through_links_in_other_folders_runs_in_the_sandbox(tmp_path, chain, isolated):
    venv = make_venv(tmp_path, chain(tmp_path))
    python = venv / "bin" / "python"
    outside = [where for where, _ in link_chain(python)[0] if not where.startswith(str(venv.resolve()))]
    assert outside, "the venv's python must lead through a link outside the venv"
    (tmp_path / "work").mkdir()
    code = (
        "import json, os, sys\n"
        f"print(json.dumps([sys.prefix, sys.base_prefix, os.path.exists({str(tmp_path / 'links' / 'private.txt')!r})]))"
    )
    outcome = run_sandboxed([str(python), "-c", code], workdir=tmp_path / "work", limits=LIMITS, readable=[venv])
    assert outcome.ok, outcome.stderr
    prefix, base_prefix, private_seen = __import__("json").loads(outcome.stdout)
    assert prefix == str(venv)  # venv detection unchanged: the venv's own settings hold
    assert os.path.realpath(base_prefix) == os.path.realpath(sys.base_prefix)
    assert not private_seen  # only the links are made again, not the folders that hold them


def test_only_the_link_is_made_again_and_the_verifiers_link_is_never_touched(tmp_path, isolated):
    venv = make_venv(tmp_path, _link_folder(tmp_path))
    (tmp_path / "work").mkdir()
    link = tmp_path / "links" / "python3"
    # Unprivileged, the sandbox's user owns its own scratch root (a user namespace), so it may
    # remove the link made there; the verifier's own link is another file and stays.
    code = (
        "import os\n"
        f"print(os.readlink({str(link)!r}), sorted(os.listdir({str(tmp_path / 'links')!r})))\n"
        f"try:\n    os.unlink({str(link)!r})\nexcept OSError:\n    pass\n"
    )
    outcome = run_sandboxed(
        [str(venv / "bin" / "python"), "-c", code], workdir=tmp_path / "work", limits=LIMITS, readable=[venv]
    )
    assert outcome.ok, outcome.stderr
    assert outcome.stdout.splitlines() == [f"{REAL_PYTHON} ['python3']"]
    assert link.is_symlink() and os.readlink(link) == REAL_PYTHON


# The readiness probe: what the workers run at start and again while they run, for /readyz.


def test_the_tier_2_probe_is_ready_where_a_linked_venvs_python_imports_torch_in_the_sandbox(tmp_path, isolated):
    venv = make_venv(tmp_path, _alternatives(tmp_path), with_project=True)
    assert probe_tier2(str(venv / "bin" / "python"), readable=[venv]) == Readiness(True)


def test_the_tier_2_probe_is_not_ready_with_the_exit_status_and_message_when_python_cannot_start(tmp_path, isolated):
    venv = make_venv(tmp_path, _link_folder(tmp_path))
    (tmp_path / "links" / "python3").unlink()  # the venv's interpreter now leads nowhere
    state = probe_tier2(str(venv / "bin" / "python"), readable=[venv])
    assert not state.ready
    assert state.reason.startswith(f"tier 2's side ({venv / 'bin' / 'python'} importing torch in the sandbox)")
    assert "exited with status 127" in state.reason and "not found" in state.reason


def test_the_tier_2_probe_is_not_ready_when_torch_does_not_import(tmp_path, isolated):
    venv = make_venv(tmp_path, _link_folder(tmp_path))  # no project packages: no torch
    state = probe_tier2(str(venv / "bin" / "python"), readable=[venv])
    assert not state.ready
    assert "exited with status 1" in state.reason and "No module named 'torch'" in state.reason


def test_the_tier_2_probe_is_kept_a_while_and_run_again_after(monkeypatch):
    from cuset_core.verify import readiness

    answers = iter([Readiness(False, "broken"), Readiness(True), Readiness(False, "broken again")])
    probes = []
    monkeypatch.setattr(readiness, "probe_tier2", lambda: probes.append(1) or next(answers))
    monkeypatch.setattr(readiness, "_last", {})
    assert readiness.tier2_readiness() == Readiness(False, "broken")
    assert readiness.tier2_readiness() == Readiness(False, "broken") and len(probes) == 1  # kept
    monkeypatch.setattr(readiness, "NOT_READY_TTL_S", 0.0)
    assert readiness.tier2_readiness() == Readiness(True) and len(probes) == 2  # fixed meanwhile
    assert readiness.tier2_readiness() == Readiness(True) and len(probes) == 2  # kept READY_TTL_S
    monkeypatch.setattr(readiness, "READY_TTL_S", 0.0)
    assert readiness.tier2_readiness() == Readiness(False, "broken again") and len(probes) == 3  # repeated
