"""`cuset keys`: listing or revoking keys reads the service's database and never creates one;
creating a key makes and migrates it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def keys(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(data_dir.parent), "CUSET_DATA_DIR": str(data_dir)}
    return subprocess.run(
        [sys.executable, "-m", "cuset_core.cli", "keys", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_listing_keys_of_a_service_without_a_database_says_so_and_creates_nothing(tmp_path):
    data_dir = tmp_path / "data"

    listed = keys(data_dir, "list")
    revoked = keys(data_dir, "revoke", "cuset-sk-abc")

    assert listed.returncode == 0 and "the service has no database yet" in listed.stderr, listed.stderr
    assert revoked.returncode == 1 and "the service has no database yet" in revoked.stderr, revoked.stderr
    assert not (data_dir / "cuset.sqlite").exists()


def test_a_created_key_is_listed(tmp_path):
    data_dir = tmp_path / "data"

    created = keys(data_dir, "create", "--name", "alice")
    listed = keys(data_dir, "list")

    assert created.returncode == 0 and created.stdout.startswith("cuset-sk-"), created.stderr
    assert listed.returncode == 0 and "alice" in listed.stdout and "active" in listed.stdout, listed.stderr


def test_data_dir_picks_the_service_over_the_environment(tmp_path):
    chosen, other = tmp_path / "chosen", tmp_path / "other"

    created = keys(other, "create", "--name", "bob", "--data-dir", str(chosen))
    listed_there = keys(other, "list", "--data-dir", str(chosen))
    listed_here = keys(other, "list")

    assert created.returncode == 0 and (chosen / "cuset.sqlite").is_file(), created.stderr
    assert "bob" in listed_there.stdout, listed_there.stderr
    assert "the service has no database yet" in listed_here.stderr and not (other / "cuset.sqlite").exists()


def test_the_key_list_shows_every_column_its_help_names(tmp_path):
    import re

    data_dir = tmp_path / "service"
    kept, revoked = keys(data_dir, "create", "--name", "carol"), keys(data_dir, "create", "--name", "dave")
    assert kept.returncode == 0 and revoked.returncode == 0
    assert keys(data_dir, "revoke", revoked.stderr.split()[1]).returncode == 0  # "key ID for owner ..."
    listed = keys(data_dir, "list")
    helped = keys(data_dir, "list", "--help")

    assert "created" in helped.stdout and "revoked" in helped.stdout
    for column in ("id", "owner", "name", "prefix", "created", "state"):
        assert column in listed.stdout.splitlines()[1], listed.stdout
    assert len(re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", listed.stdout)) == 3  # two created, one revoked
    assert "active" in listed.stdout and "revoked" in listed.stdout
