"""`cuset serve` with no configuration: SQLite and its Celery broker in a data dir, migrations,
a worker child, the API; SIGTERM stops all of it."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from api.launch import free_port
from tests.service import REPO, wait_for


def embedded_env(data_dir: Path) -> dict[str, str]:
    """The caller's environment without any CUSET_ setting, so the defaults apply."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("CUSET_")}
    env["CUSET_DATA_DIR"] = str(data_dir)
    return env


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, stack = set(), [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    return found


def alive(pid: int) -> bool:
    """Running (a zombie waiting for an init that does not reap counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture()
def embedded(tmp_path):
    """A `cuset serve` child on a free port; yields (process, base URL, data dir)."""
    data_dir = tmp_path / "data"
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "cuset_core.cli", "serve", "--port", str(port)],
        cwd=REPO,
        env=embedded_env(data_dir),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    yield process, f"http://127.0.0.1:{port}", data_dir
    for pid in descendants(process.pid):
        os.kill(pid, signal.SIGKILL)
    process.kill()
    process.wait(10)


def ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_serve_migrates_serves_and_stops_with_its_worker_on_sigterm(embedded, tmp_path):
    process, base, data_dir = embedded
    wait_for(lambda: ready(base) or process.poll() is not None, timeout=120, what="/readyz")
    assert process.poll() is None, (tmp_path / "serve.log").read_text()

    with sqlite3.connect(data_dir / "cuset.sqlite") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone()
    worker_log = data_dir / "logs" / "worker.log"
    wait_for(lambda: worker_log.exists() and " ready." in worker_log.read_text(), timeout=90, what="the worker")
    assert (data_dir / "broker.sqlite").exists()

    # The banner says what verification can do here, not only the worker's log.
    assert re.search(r"sandbox:\s+(isolated|NOT isolated)", (tmp_path / "serve.log").read_text())
    # A fresh service prints a first key; `cuset keys create` makes more. Both work.
    first = re.search(r"API key:\s+(cuset-sk-\S+)", (tmp_path / "serve.log").read_text())
    assert first, (tmp_path / "serve.log").read_text()
    assert httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {first.group(1)}"}).status_code == 200
    assert httpx.get(f"{base}/v1/models").status_code == 401
    key = subprocess.run(
        [sys.executable, "-m", "cuset_core.cli", "keys", "create", "--name", "embedded-test"],
        cwd=REPO,
        env=embedded_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    auth = {"Authorization": f"Bearer {key}"}
    from cuset_core.demo import write_demo_dataset

    dataset = tmp_path / "train.jsonl"
    write_demo_dataset(dataset)
    with open(dataset, "rb") as handle:
        uploaded = httpx.post(
            f"{base}/v1/files",
            data={"purpose": "fine-tune"},
            files={"file": ("train.jsonl", handle, "application/jsonl")},
            headers=auth,
            timeout=60,
        )
    assert uploaded.status_code == 200, uploaded.text
    file_id = uploaded.json()["id"]
    assert httpx.get(f"{base}/v1/files/{file_id}", headers=auth).json()["filename"] == "train.jsonl"
    assert httpx.get(f"{base}/docs").status_code == 200

    children = descendants(process.pid)
    assert len(children) >= 2, "the worker and its pool processes run under cuset serve"
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0
    wait_for(lambda: not any(alive(pid) for pid in children), timeout=15, what="the worker's processes to end")
    log = (tmp_path / "serve.log").read_text()
    assert "dashboard: http://127.0.0.1:" in log and "stopping the worker" in log


def test_migrate_command_creates_the_schema(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "cuset_core.cli", "migrate", "--data-dir", str(tmp_path)],
        cwd=REPO,
        env=embedded_env(tmp_path / "unused"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(tmp_path / "cuset.sqlite") as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"alembic_version", "files", "fine_tuning_jobs"} <= tables
