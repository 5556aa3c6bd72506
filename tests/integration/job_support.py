"""Helpers the job tests share: upload the demo dataset, build a small CuSeT job request, and
read a job's state straight from the API, and record a succeeded job that produced a tuned model."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from cuset_core.demo import demo_problems, write_demo_dataset
from db.models import File, Job
from db.session import session_scope
from tests.service import TEST_OWNER

# Long enough for the demo answers (most are 600-1000 tokens), short enough to train in seconds.
MAX_SEQ_LEN = 1024
FINISHED = {"succeeded", "failed", "cancelled"}


def demo_dataset_bytes() -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "demo.jsonl"
        write_demo_dataset(path)
        return path.read_bytes()


def upload_demo_dataset(client) -> str:
    """Upload the demo dataset with ``POST /v1/files`` (purpose fine-tune); returns its id."""
    response = client.post(
        "/v1/files", files={"file": ("demo.jsonl", demo_dataset_bytes())}, data={"purpose": "fine-tune"}
    )
    assert response.status_code == 200, response.text
    return response.json()["id"]


def upload_eval_problems(client) -> str:
    rows = [{"id": p.id, "problem": p.problem_code} for p in demo_problems()[:2]]
    content = b"".join(json.dumps(row).encode() + b"\n" for row in rows)
    response = client.post("/v1/files", files={"file": ("problems.jsonl", content)}, data={"purpose": "eval"})
    assert response.status_code == 200, response.text
    return response.json()["id"]


def job_request(training_file: str, *, max_steps: int = 8, **extra) -> dict:
    """A CuSeT job on the tiny base model: batch 2, a checkpoint every 2 steps."""
    return {
        "model": "tiny",
        "training_file": training_file,
        "method": {"type": "cuset"},
        "hyperparameters": {"max_steps": max_steps, "batch_size": 2, "save_steps": 2, "max_seq_len": MAX_SEQ_LEN},
        **extra,
    }


def job_state(client, job_id: str) -> dict:
    response = client.get(f"/v1/fine_tuning/jobs/{job_id}")
    assert response.status_code == 200, response.text
    return response.json()


def event_messages(client, job_id: str) -> list[str]:
    """Every event message of a job, oldest first."""
    return [
        e["message"]
        for e in reversed(client.get(f"/v1/fine_tuning/jobs/{job_id}/events", params={"limit": 100}).json()["data"])
    ]


def add_tuned_model(settings, name: str, output_dir: str, owner: str = TEST_OWNER) -> None:
    """A succeeded fine-tuning job whose adapter lives in ``output_dir`` (under the artifact root)."""
    with session_scope(settings.resolved_database_url) as session:
        file = File(
            id=f"file-{name}", owner=owner, filename="t.jsonl", purpose="fine-tune", format="jsonl", bytes=1, path="x"
        )
        session.add(file)
        session.flush()
        session.add(
            Job(
                id=f"ftjob-{name}",
                owner=owner,
                model="tiny",
                training_file=file.id,
                method={"type": "supervised"},
                hyperparameters={},
                status="succeeded",
                fine_tuned_model=f"ft:tiny:{name}",
                output_dir=output_dir,
                created_at=time.time(),
                finished_at=time.time(),
            )
        )
