"""Requests/s and latency of the API's hottest read, ``GET /v1/fine_tuning/jobs/{id}`` (what a
dashboard or a client polling for progress sends), from concurrent loopback clients.

Usage (from the repository root):

    .venv/bin/python bench/api_load.py --spawn [--workers 1] [--concurrency 8] [--seconds 10]
        [--tuning [--broker redis://127.0.0.1:6379/1] [--tuning-model smollm2-135m] [--train-nice N]]
    .venv/bin/python bench/api_load.py --url http://127.0.0.1:8000 --database-url URL

``--spawn`` (the default) creates a temporary Postgres database next to ``--admin-url``,
migrates it, starts ``uvicorn --workers N`` on it, and drops the database at the end. With
``--url`` the server must use ``--database-url``. Either way the bench writes its own rows
straight into the database (an API key and ``--jobs`` jobs on one file, removed afterwards),
then polls those jobs round-robin with ``--concurrency`` httpx async clients until
``--seconds`` or ``--requests`` is reached, after a short warm-up. The spawned server has the
per-key rate limit off (it would measure the limiter, not the API). Prints one JSON line.
Target on the 2-core development machine: >= 300 requests/s with p99 <= 100 ms.

``--tuning`` (with ``--spawn``) measures the load twice in one run: first with nothing else
running (printed under ``idle``), then while a tuning job trains on the same machine. The server
gets ``--broker`` and a Celery worker on the ``train`` and ``cpu`` queues; the bench uploads the
demo dataset, creates a CuSeT job on ``--tuning-model`` through the API, starts the second load
once the job has trained a step, checks it was still running when the load ended (its steps
before and after are printed), then cancels it. The top-level figures are those under training.
The training process runs at the service's ``train_nice`` (10 unless ``--train-nice`` says
otherwise; docs/deploy.md, Sharing a host); the figures name the niceness used.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx
from sqlalchemy import create_engine, delete, text

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from api.embedded import worker_command  # noqa: E402
from api.launch import ApiServer  # noqa: E402
from db.ids import new_id  # noqa: E402
from db.keys import create_key  # noqa: E402
from db.migrate import upgrade  # noqa: E402
from db.models import ApiKey, File, Job  # noqa: E402
from db.session import engine_for, session_scope  # noqa: E402
from db.settings import Settings  # noqa: E402

ADMIN_URL = os.environ.get("CUSET_TEST_PG_ADMIN", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
OWNER = "bench"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--spawn", action="store_true", help="start uvicorn on a temporary database (default)")
    target.add_argument("--url", help="base URL of a running server")
    parser.add_argument("--database-url", help="the running server's database (with --url)")
    parser.add_argument(
        "--admin-url", default=ADMIN_URL, help="Postgres URL used to create/drop the temporary database"
    )
    # One: the load client needs the other core of a 2-core machine, and uvicorn's multi-process
    # mode delays every response ~40 ms (docs/deploy.md, Measuring).
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (--spawn)")
    # Closed loop: mean latency = concurrency / throughput (Little's law), so 8 in flight at
    # 300 requests/s leaves ~27 ms each; 32 in flight could not meet p99 <= 100 ms at any rate
    # two cores reach.
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    parser.add_argument("--seconds", type=float, default=10.0, help="measurement time, s")
    parser.add_argument("--requests", type=int, default=20_000, help="stop after this many requests")
    parser.add_argument("--warmup", type=float, default=2.0, help="untimed warm-up, s")
    parser.add_argument("--jobs", type=int, default=20, help="job rows polled round-robin")
    parser.add_argument("--tuning", action="store_true", help="measure while a tuning job trains (--spawn)")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/1", help="Celery broker with --tuning")
    parser.add_argument("--tuning-model", default="smollm2-135m", help="base model the tuning job trains")
    parser.add_argument("--train-nice", type=int, help="CUSET_TRAIN_NICE of the worker (default: the service's)")
    args = parser.parse_args()
    if args.url and not args.database_url:
        parser.error("--url needs --database-url (the bench writes its job rows there)")
    if args.url and args.tuning:
        parser.error("--tuning starts its own worker; use it with --spawn")
    return args


# ---------------------------------------------------------------- rows


def seed_rows(database_url: str, jobs: int) -> tuple[str, list[str], str]:
    """An API key, one file and ``jobs`` running jobs with progress; returns (key, job ids, file id)."""
    now = time.time()
    with session_scope(database_url) as session:
        key = create_key(session, "api-load-bench", OWNER)
        file = File(
            id=new_id("file"),
            owner=OWNER,
            filename="bench.jsonl",
            purpose="fine-tune",
            format="jsonl",
            bytes=1,
            path="bench/none.jsonl",
            records=1,
            total_rows=1,
            warnings=[],
            created_at=now,
        )
        session.add(file)
        session.flush()
        ids = []
        for n in range(jobs):
            job = Job(
                id=new_id("ftjob"),
                owner=OWNER,
                model="smollm2-135m",
                training_file=file.id,
                method={"type": "cuset"},
                hyperparameters={"n_epochs": 1, "batch_size": 2, "learning_rate_multiplier": 1.0},
                status="running",
                step=n,
                total_steps=100,
                eta_s=60.0,
                created_at=now,
                started_at=now,
                heartbeat_at=now,
            )
            session.add(job)
            ids.append(job.id)
        return key.secret, ids, file.id


def remove_rows(database_url: str, key: str, job_ids: list[str], file_id: str) -> None:
    from db.keys import hash_key

    with session_scope(database_url) as session:
        session.execute(delete(Job).where(Job.id.in_(job_ids)))
        session.execute(delete(File).where(File.id == file_id))
        session.execute(delete(ApiKey).where(ApiKey.hash == hash_key(key)))


# ---------------------------------------------------------------- the spawned server


class TemporaryDatabase:
    """A Postgres database created next to ``admin_url``, migrated; dropped on exit."""

    def __init__(self, admin_url: str) -> None:
        self.admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self.name = f"cuset_bench_{os.getpid()}_{secrets.token_hex(3)}"
        self.url = admin_url.rsplit("/", 1)[0] + f"/{self.name}"

    def __enter__(self) -> str:
        with self.admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{self.name}"'))
        upgrade(self.url)
        return self.url

    def __exit__(self, *exc) -> None:
        engine_for(self.url).dispose()
        with self.admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        self.admin.dispose()


def service_env(database_url: str, data_dir: Path, broker: str | None, train_nice: int | None) -> dict[str, str]:
    """The environment of the spawned server (and tuning worker): this database, no rate limit."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("CUSET_")}
    env.update(CUSET_DATABASE_URL=database_url, CUSET_DATA_DIR=str(data_dir), CUSET_RATE_LIMIT_RPS="0")
    if train_nice is not None:
        env.update(CUSET_TRAIN_NICE=str(train_nice))
    if broker:
        env.update(CUSET_BROKER_URL=broker, CUSET_BROKER_KEY_PREFIX=f"cuset-bench-{os.getpid()}:")
        # The seeded job rows count as the owner's running jobs; the real one must still fit.
        env.update(CUSET_MAX_CONCURRENT_JOBS="1000")
    return env


def spawn_train_worker(env: dict[str, str], data_dir: Path) -> subprocess.Popen:
    """One Celery worker on the ``train`` queue (training runs in its own subprocess) and ``cpu``
    (the training file's validation)."""
    return subprocess.Popen(
        worker_command(queues=("train", "cpu"), beat=False, hostname=f"bench-{os.getpid()}@%h", log_level="WARNING"),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(data_dir / "worker.log", "wb"),
    )


def stop(process: subprocess.Popen, grace_s: float = 120) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``: a cancelled run saving its checkpoint on a loaded
    machine can outlast any grace, and the figures are already measured."""
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def start_tuning(base: str, key: str, model: str, timeout_s: float = 300) -> str:
    """Upload the demo dataset, create a long CuSeT job on ``model``, wait until it runs; its id."""
    from cuset_core.demo import write_demo_dataset

    headers = {"Authorization": f"Bearer {key}"}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "demo.jsonl"
        write_demo_dataset(path)
        uploaded = httpx.post(
            f"{base}/v1/files",
            headers=headers,
            files={"file": ("demo.jsonl", path.read_bytes())},
            data={"purpose": "fine-tune"},
            timeout=60,
        )
    uploaded.raise_for_status()
    created = httpx.post(
        f"{base}/v1/fine_tuning/jobs",
        headers=headers,
        timeout=60,
        json={
            "model": model,
            "training_file": uploaded.json()["id"],
            "method": {"type": "cuset"},
            "hyperparameters": {"max_steps": 10_000, "batch_size": 2, "max_seq_len": 1024},
        },
    )
    created.raise_for_status()
    job_id = created.json()["id"]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = tuning_status(base, key, job_id)
        if status["status"] == "running" and status["step"] > 0:
            return job_id
        if status["status"] in ("failed", "cancelled", "succeeded"):
            raise RuntimeError(f"the tuning job ended before the load: {status}")
        time.sleep(1)
    raise RuntimeError(f"the tuning job did not start training in {timeout_s:g} s: {status}")


def tuning_status(base: str, key: str, job_id: str) -> dict:
    """The job's status and step, as the API reports them."""
    job = httpx.get(f"{base}/v1/fine_tuning/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    job.raise_for_status()
    body = job.json()
    return {"status": body["status"], "step": body["progress"]["step"]}


# ---------------------------------------------------------------- the load


async def load(
    base: str, key: str, job_ids: list[str], concurrency: int, seconds: float, max_requests: int, warmup_s: float
) -> dict:
    """Closed-loop load: ``concurrency`` tasks each send the next request when one returns."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    counter = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {key}"}, limits=limits, timeout=10
    ) as client:

        async def one(record: bool) -> None:
            nonlocal counter
            job_id = job_ids[counter % len(job_ids)]
            counter += 1
            started = time.perf_counter()
            try:
                response = await client.get(f"/v1/fine_tuning/jobs/{job_id}")
                ok = response.status_code == 200 and response.json()["id"] == job_id
                reason = str(response.status_code)
            except httpx.HTTPError as exc:
                ok, reason = False, type(exc).__name__
            if record:
                latencies.append(time.perf_counter() - started)
                if not ok:
                    errors[reason] = errors.get(reason, 0) + 1

        async def client_loop(until: float, record: bool, budget: list[int]) -> None:
            while time.perf_counter() < until and budget[0] > 0:
                budget[0] -= 1
                await one(record)

        warm_until = time.perf_counter() + warmup_s
        await asyncio.gather(*(client_loop(warm_until, False, [10**9]) for _ in range(concurrency)))
        budget = [max_requests]
        started = time.perf_counter()
        await asyncio.gather(*(client_loop(started + seconds, True, budget) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "route": "GET /v1/fine_tuning/jobs/{id}",
        "requests": len(latencies),
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(1000 * statistics.median(ordered), 1),
        "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
        "errors": sum(errors.values()),
        "errors_by_reason": errors,
        "concurrency": concurrency,
    }


def main() -> None:
    args = parse_args()
    if args.url:
        key, job_ids, file_id = seed_rows(args.database_url, args.jobs)
        try:
            result = asyncio.run(
                load(args.url.rstrip("/"), key, job_ids, args.concurrency, args.seconds, args.requests, args.warmup)
            )
        finally:
            remove_rows(args.database_url, key, job_ids, file_id)
        print(json.dumps(result | {"target": args.url}))
        return
    with TemporaryDatabase(args.admin_url) as database_url, tempfile.TemporaryDirectory() as data_dir:
        key, job_ids, _ = seed_rows(database_url, args.jobs)
        env = service_env(database_url, Path(data_dir), args.broker if args.tuning else None, args.train_nice)
        server = ApiServer(env, Path(data_dir) / "uvicorn.log", workers=args.workers, access_log=False)
        server.start()
        base = server.base
        trainer = spawn_train_worker(env, Path(data_dir)) if args.tuning else None
        tuning: dict = {}
        try:
            measure = partial(load, base, key, job_ids, args.concurrency, args.seconds, args.requests, args.warmup)
            if args.tuning:
                idle = asyncio.run(measure())
                tuning_id = start_tuning(base, key, args.tuning_model)
                before = tuning_status(base, key, tuning_id)
            result = asyncio.run(measure())
            if args.tuning:
                after = tuning_status(base, key, tuning_id)
                tuning = {
                    "idle": {name: idle[name] for name in ("requests_per_s", "p50_ms", "p99_ms", "errors")},
                    "tuning_model": args.tuning_model,
                    "train_nice": int(env.get("CUSET_TRAIN_NICE", Settings.model_fields["train_nice"].default)),
                    "tuning_steps": [before["step"], after["step"]],
                    "tuning_ran_throughout": after["status"] == "running",
                }
                httpx.post(
                    f"{base}/v1/fine_tuning/jobs/{tuning_id}/cancel",
                    headers={"Authorization": f"Bearer {key}"},
                    timeout=30,
                )
        except Exception:
            for log in ("uvicorn.log", "worker.log"):
                if (Path(data_dir) / log).exists():
                    print((Path(data_dir) / log).read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            server.stop()
            if trainer is not None:
                stop(trainer)
    print(json.dumps(result | tuning | {"uvicorn_workers": args.workers, "cpus": os.cpu_count()} | uvicorn_stack()))


def uvicorn_stack() -> dict[str, str]:
    """The event loop and HTTP parser the spawned uvicorn picks ("auto": the fast ones when
    installed; it runs this interpreter with this environment)."""
    return {
        "uvicorn_loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        "uvicorn_http": "httptools" if importlib.util.find_spec("httptools") else "h11",
    }


if __name__ == "__main__":
    main()
