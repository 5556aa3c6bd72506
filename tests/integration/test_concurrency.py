"""Concurrency over loopback against a real uvicorn with auth on: 50 simultaneous job creations
without and with Idempotency-Key, then 200 simultaneous status pollers. Every job must be
accounted for exactly once: in the responses, in the database, in the events and in the list.

The server gets a broker key prefix of its own, so the jobs' messages reach no worker (nobody
trains 60 jobs on a shared 2-core machine); the run's cleanup removes those keys with its own.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx
import pytest
from sqlalchemy import func, select

from db.models import Job, JobEvent
from db.session import session_scope
from tests.integration.security_support import bearer, new_key, secure_settings, training_rows
from tests.real_service import ServiceServer

CREATORS = 50
IDEMPOTENCY_KEYS = 10  # the 50 keyed requests are 5 retries of each of 10 jobs
POLLERS = 200
POLLS_EACH = 3
POLLED_JOBS = 20
BUSY_RETRIES = 5
REQUEST_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def loopback(service_settings, database_url, tmp_path_factory):
    """(base URL, API key, owner's training file) of a uvicorn with auth on and its own queues."""
    settings = secure_settings(
        service_settings,
        broker_key_prefix=f"{service_settings.broker_key_prefix}concurrency:",
        max_concurrent_jobs=1000,
    )
    server = ServiceServer(settings, tmp_path_factory.mktemp("concurrency-server"))
    server.start()
    secret = new_key(database_url)
    upload = httpx.post(
        f"{server.base}/v1/files",
        headers=bearer(secret),
        data={"purpose": "fine-tune"},
        files={"file": ("train.jsonl", training_rows())},
        timeout=REQUEST_TIMEOUT_S,
    )
    assert upload.status_code == 200, upload.text
    yield server.base, secret, upload.json()["id"]
    server.stop()


async def _create_all(base: str, secret: str, bodies: list[dict], keys: list[str | None]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=0)
    async with httpx.AsyncClient(
        base_url=base, headers=bearer(secret), timeout=REQUEST_TIMEOUT_S, limits=limits
    ) as client:
        return await asyncio.gather(
            *(
                client.post("/v1/fine_tuning/jobs", json=body, headers={"Idempotency-Key": key} if key else {})
                for body, key in zip(bodies, keys)
            )
        )


def _owner_jobs(database_url: str, ids: set[str]) -> tuple[Counter, Counter]:
    """How many rows and 'Job created' events the database holds per job id."""
    with session_scope(database_url) as session:
        rows = Counter(session.scalars(select(Job.id).where(Job.id.in_(ids))))
        events = Counter(
            session.scalars(select(JobEvent.job_id).where(JobEvent.job_id.in_(ids), JobEvent.message == "Job created"))
        )
    return rows, events


def _listed(base: str, secret: str) -> list[str]:
    ids, after = [], None
    while True:
        page = httpx.get(
            f"{base}/v1/fine_tuning/jobs",
            headers=bearer(secret),
            timeout=REQUEST_TIMEOUT_S,
            params={"limit": 100, **({"after": after} if after else {})},
        ).json()
        ids += [job["id"] for job in page["data"]]
        if not page["has_more"]:
            return ids
        after = page["last_id"]


def test_50_concurrent_creations_make_50_jobs_each_once(loopback, database_url):
    base, secret, file_id = loopback
    bodies = [{"model": "tiny", "training_file": file_id, "metadata": {"n": str(i)}} for i in range(CREATORS)]
    started = time.monotonic()
    responses = asyncio.run(_create_all(base, secret, bodies, [None] * CREATORS))
    elapsed = time.monotonic() - started
    assert [r.status_code for r in responses] == [200] * CREATORS, [
        r.text[:300] for r in responses if r.status_code != 200
    ]
    ids = [r.json()["id"] for r in responses]
    assert len(set(ids)) == CREATORS
    assert sorted(r.json()["metadata"]["n"] for r in responses) == sorted(str(i) for i in range(CREATORS))
    rows, events = _owner_jobs(database_url, set(ids))
    assert rows == Counter(set(ids)) and events == Counter(set(ids))
    listed = _listed(base, secret)
    assert Counter(listed)[ids[0]] == 1 and set(ids) <= set(listed) and len(listed) == len(set(listed))
    print(f"\n{CREATORS} concurrent creations without Idempotency-Key: {elapsed:.2f} s, {len(set(ids))} jobs")


def test_50_concurrent_keyed_creations_make_one_job_per_key(loopback, database_url):
    base, secret, file_id = loopback
    run = f"{time.time_ns()}"
    keys = [f"key-{run}-{i % IDEMPOTENCY_KEYS}" for i in range(CREATORS)]
    bodies = [{"model": "tiny", "training_file": file_id, "metadata": {"key": key}} for key in keys]
    started = time.monotonic()
    responses = asyncio.run(_create_all(base, secret, bodies, keys))
    elapsed = time.monotonic() - started
    assert [r.status_code for r in responses] == [200] * CREATORS, [
        r.text[:300] for r in responses if r.status_code != 200
    ]
    job_of_key: dict[str, set[str]] = {}
    for key, response in zip(keys, responses):
        job_of_key.setdefault(key, set()).add(response.json()["id"])
    assert all(len(jobs) == 1 for jobs in job_of_key.values()), job_of_key
    ids = {job for jobs in job_of_key.values() for job in jobs}
    assert len(ids) == IDEMPOTENCY_KEYS
    rows, events = _owner_jobs(database_url, ids)
    assert rows == Counter(ids) and events == Counter(ids)
    with session_scope(database_url) as session:
        keyed = session.scalar(select(func.count()).select_from(Job).where(Job.idempotency_key.like(f"key-{run}-%")))
    assert keyed == IDEMPOTENCY_KEYS
    print(
        f"\n{CREATORS} concurrent creations over {IDEMPOTENCY_KEYS} Idempotency-Keys: {elapsed:.2f} s, {len(ids)} jobs"
    )


def test_200_concurrent_pollers_each_see_their_job(loopback):
    base, secret, file_id = loopback
    bodies = [{"model": "tiny", "training_file": file_id} for _ in range(POLLED_JOBS)]
    jobs = [r.json()["id"] for r in asyncio.run(_create_all(base, secret, bodies, [None] * POLLED_JOBS))]
    targets = [jobs[i % len(jobs)] for i in range(POLLERS)]

    async def poll_all() -> list[list[httpx.Response]]:
        limits = httpx.Limits(max_connections=POLLERS, max_keepalive_connections=POLLERS)
        async with httpx.AsyncClient(
            base_url=base, headers=bearer(secret), timeout=REQUEST_TIMEOUT_S, limits=limits
        ) as client:

            async def poll(job_id: str) -> httpx.Response:
                # As a client should: a 503 says "busy, retry after N s" and is retried, and so is a
                # kept-alive connection the server closed (idle past its keep-alive timeout on a
                # loaded machine) just as the request went out on it.
                for attempt in range(BUSY_RETRIES):
                    try:
                        response = await client.get(f"/v1/fine_tuning/jobs/{job_id}")
                    except (httpx.ReadError, httpx.RemoteProtocolError):
                        if attempt == BUSY_RETRIES - 1:
                            raise
                        continue
                    if response.status_code != 503:
                        return response
                    busy.append(response)
                    await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
                return response

            async def poller(job_id: str) -> list[httpx.Response]:
                return [await poll(job_id) for _ in range(POLLS_EACH)]

            return await asyncio.gather(*(poller(job_id) for job_id in targets))

    busy: list[httpx.Response] = []
    started = time.monotonic()
    results = asyncio.run(poll_all())
    elapsed = time.monotonic() - started
    statuses = Counter(r.status_code for responses in results for r in responses)
    assert statuses == {200: POLLERS * POLLS_EACH}, statuses
    for job_id, responses in zip(targets, results):
        assert {r.json()["id"] for r in responses} == {job_id}
    for response in busy:  # a busy answer is the documented 503, never a bare failure
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    print(
        f"\n{POLLERS} pollers x {POLLS_EACH} polls: {elapsed:.2f} s, "
        f"{POLLERS * POLLS_EACH / elapsed:.0f} requests/s, statuses {dict(statuses)}, {len(busy)} busy retries"
    )
