"""Fault injection with real processes, each bounded in time: the database stops, the broker
restarts under queued and running jobs, the disk fills during an upload.

Servers that a test stops are PRIVATE (tests/integration/private_services.py): the machine's
shared Postgres and Redis serve other runs at the same time and are never touched. (A worker
killed with SIGKILL mid-training is covered by the jobs tests.)
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.main import create_app
from db.migrate import upgrade
from db.models import File, Job, JobEvent
from db.session import engine_for, session_scope
from tests.integration.job_support import short_dataset_bytes
from tests.integration.private_services import PrivatePostgres, PrivateRedis
from tests.integration.security_support import assert_error, bearer, new_key, secure_settings, training_rows
from tests.real_service import WorkerProcess, wait_for

OUTAGE_S = 10.0
RECOVERY_LIMIT_S = 30.0
FINISHED = {"succeeded", "failed", "cancelled"}


def upload(client: TestClient, content: bytes, name: str = "train.jsonl"):
    return client.post("/v1/files", files={"file": (name, content)}, data={"purpose": "fine-tune"})


@pytest.fixture(scope="module")
def private_postgres() -> PrivatePostgres:
    server = PrivatePostgres()
    server.start()
    yield server
    server.remove()


# ------------------------------------------------------------------ the database stops for 10 s


def test_database_outage_is_503_in_the_error_shape_and_the_api_recovers_by_itself(service_settings, private_postgres):
    url = private_postgres.create_database("cuset_outage")
    upgrade(url)
    secret = new_key(url)
    settings = secure_settings(service_settings, database_url=url)
    client = TestClient(create_app(settings), headers=bearer(secret), raise_server_exceptions=False)
    file_id = upload(client, training_rows()).json()["id"]

    private_postgres.stop()
    started, answers = time.monotonic(), Counter()
    try:
        while time.monotonic() - started < OUTAGE_S:
            for response in (
                client.get("/v1/files"),
                client.get(f"/v1/files/{file_id}"),
                client.post("/v1/fine_tuning/jobs", json={"model": "tiny", "training_file": file_id}),
                client.get("/v1/models"),
            ):
                error = assert_error(response, 503, "database_unavailable")
                assert error["type"] == "service_unavailable_error"
                assert response.headers.get("Retry-After")
                answers[response.status_code] += 1
            assert_error(client.get("/readyz"), 503, "database_unavailable", "database")
            assert client.get("/healthz").status_code == 200  # the process itself is fine
            time.sleep(0.5)
    finally:
        private_postgres.start()
    back = time.monotonic()
    recovered = wait_for(
        lambda: (r := client.get("/v1/files")).status_code == 200 and r,
        timeout=RECOVERY_LIMIT_S,
        what="the API answering again",
    )
    recovery_s = time.monotonic() - back
    assert file_id in {f["id"] for f in recovered.json()["data"]}
    assert client.get("/readyz").status_code == 200
    print(
        f"\ndatabase outage {OUTAGE_S:.0f} s: {sum(answers.values())} requests, all 503 database_unavailable; "
        f"API back {recovery_s:.2f} s after Postgres accepted connections"
    )
    engine_for(url).dispose()


# ------------------------------------------------------------------ the broker restarts


@pytest.mark.slow
def test_redis_restart_under_queued_and_running_jobs_loses_none_and_runs_none_twice(
    service_settings, database_url, tmp_path_factory
):
    broker = PrivateRedis(tmp_path_factory.mktemp("private-redis"))
    broker.start()
    settings = service_settings.model_copy(update={"broker_url": broker.url, "broker_key_prefix": ""})
    worker = WorkerProcess(settings, tmp_path_factory.mktemp("restart-worker"), concurrency=1)
    worker.start()
    secret = new_key(database_url)
    client = TestClient(create_app(secure_settings(settings, max_concurrent_jobs=10)), headers=bearer(secret))
    try:
        file_id = upload(client, short_dataset_bytes()).json()["id"]
        request = {
            "model": "tiny",
            "training_file": file_id,
            "method": {"type": "cuset"},
            "hyperparameters": {"max_steps": 4, "batch_size": 2, "save_steps": 2, "max_seq_len": 1024},
        }
        jobs = [client.post("/v1/fine_tuning/jobs", json=request).json()["id"] for _ in range(3)]

        def states() -> dict[str, str]:
            return {job: client.get(f"/v1/fine_tuning/jobs/{job}").json()["status"] for job in jobs}

        # One worker slot: the first job trains while the others wait in the broker.
        before = wait_for(lambda: "running" in (s := states()).values() and s, timeout=180, what="a running job")
        broker.stop(kill=True)
        time.sleep(3)
        broker.start()

        def all_finished() -> dict[str, str] | None:
            now = states()
            return now if set(now.values()) <= FINISHED else None

        done = wait_for(all_finished, timeout=600, what="every job finished after the broker restart")
        with session_scope(database_url) as session:
            attempts = dict(session.execute(select(Job.id, Job.attempts).where(Job.id.in_(jobs))).all())
            messages = [
                (e.job_id, e.message) for e in session.scalars(select(JobEvent).where(JobEvent.job_id.in_(jobs)))
            ]
        starts = Counter(job for job, message in messages if message.startswith("Fine-tuning job started"))
        completions = Counter(job for job, message in messages if message == "The job has successfully completed")
        print(f"\nbefore the restart: {before}; after: {done}; attempts {attempts}; starts {dict(starts)}")
        assert done == {job: "succeeded" for job in jobs}, done
        assert completions == Counter(jobs)  # each job finished exactly once
        assert starts == Counter(attempts)  # every start is an attempt the database counted
        assert all(count == 1 for count in attempts.values()), attempts  # nothing ran twice
    finally:
        worker.stop()
        broker.stop()


# ------------------------------------------------------------------ the disk fills during an upload


@pytest.fixture()
def tiny_disk(tmp_path) -> Path:
    """A 1 MiB tmpfs as the artifact root (skipped where mounting is not permitted)."""
    folder = tmp_path / "tiny-disk"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def test_disk_full_during_an_upload_is_a_clear_error_and_leaves_nothing(service_settings, database_url, tiny_disk):
    secret = new_key(database_url)
    settings = secure_settings(service_settings, artifact_root=tiny_disk, max_upload_mb=8)
    client = TestClient(create_app(settings), headers=bearer(secret), raise_server_exceptions=False)
    rows = training_rows()
    big = rows * (3 * 2**20 // len(rows) + 1)  # ~3 MiB of valid rows: larger than the disk, under the limit

    def file_rows() -> int:
        with session_scope(database_url) as session:
            return session.scalar(select(func.count()).select_from(File).where(File.path.like("files/%")))

    rows_before = file_rows()
    response = upload(client, big)
    leftovers = [p for p in tiny_disk.rglob("*") if p.is_file()]
    assert leftovers == [], leftovers
    assert file_rows() == rows_before
    error = assert_error(response, 507, "insufficient_storage")
    assert "space" in error["message"].lower() or "storage" in error["message"].lower()
    # Space is back once the failed upload is gone: a small upload works at once.
    small = upload(client, rows)
    assert small.status_code == 200, small.text
    assert os.path.getsize(tiny_disk / "files" / f"{small.json()['id']}.jsonl") == len(rows)
