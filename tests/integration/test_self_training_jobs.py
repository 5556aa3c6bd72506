"""Self-training jobs end to end: the API on real Postgres, a real Celery worker on real Redis, and
``python -m cuset_core.improve`` sampling from the tiny base model, verifying its answers for real
and tuning it every round."""

from __future__ import annotations

import pytest

from cuset_core.demo import demo_problems
from tests.integration.job_support import (
    FINISHED,
    event_messages,
    job_request,
    job_state,
    upload_eval_problems,
    upload_problems,
    upload_short_dataset,
)
from tests.real_service import wait_for

DEMO = {p.id: p.problem_code for p in demo_problems()}


@pytest.fixture(scope="module")
def training_file(app, auth_headers) -> str:
    from fastapi.testclient import TestClient

    with TestClient(app, headers=auth_headers) as client:
        return upload_short_dataset(client)


def self_training_job(client, training_file: str, **rounds) -> dict:
    body = job_request(training_file, max_steps=1) | {"method": {"type": "cuset", "self_training": rounds}}
    response = client.post("/v1/fine_tuning/jobs", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def finished(client, job_id: str, timeout: float) -> dict:
    return wait_for(
        lambda: (s := job_state(client, job_id))["status"] in FINISHED and s, timeout=timeout, what="job end"
    )


def test_a_self_training_job_runs_its_rounds_and_reports_each(client, worker, training_file):
    # The pool holds the first problem of the eval file below (01_vector_add).
    pool = upload_problems(client, {"add": DEMO["01_vector_add"], "relu": DEMO["02_relu"]})
    job = self_training_job(
        client, training_file, problems_file=pool, rounds=2, samples_per_problem=2, max_new_tokens=8, tier="compile"
    )
    done = finished(client, job["id"], timeout=300)
    assert done["status"] == "succeeded", done["error"]
    assert done["progress"]["step"] == done["progress"]["total_steps"] == 2  # counted in rounds
    assert done["fine_tuned_model"] == f"ft:tiny::{job['id']}" and done["trained_tokens"] > 0

    rounds = client.get(f"/v1/fine_tuning/jobs/{job['id']}/metrics").json()["data"]
    assert [r["step"] for r in rounds] == [1, 2]
    for figures in rounds:
        # Eight tokens of the untrained tiny model are no kernel: verified, failed, nothing kept.
        assert (figures["sampled"], figures["passed"], figures["kept_total"]) == (4, 0, 0)
        assert figures["sample_verify_s"] > 0
    # Round 1 tunes on the training file; round 2 kept nothing new, so it tunes nothing again.
    assert rounds[0]["train_s"] > 0 and rounds[1]["train_s"] < 0.01
    messages = event_messages(client, job["id"])
    assert any(m.startswith("Round 1/2: 4 sampled, 0 compiled, 0 passed, 0 kept") for m in messages), messages
    # Within a round, its stages advance in the events too (two problems: each half is a tenth and more).
    for stage in ("sampling", "verifying"):
        assert f"Round 1/2: {stage} 2/2 problems" in messages, messages
    checkpoints = client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints").json()["data"]
    assert [c["step_number"] for c in checkpoints] == [1]  # the one round that tuned
    # The result is the last adapter a round tuned (nothing kept, so no answers file).
    [archive] = done["result_files"]
    assert client.get(f"/v1/files/{archive}").json()["purpose"] == "fine-tune-results"
    assert done["fine_tuned_model"] in [m["id"] for m in client.get("/v1/models").json()["data"]]

    # The tuned model sampled 01_vector_add: an eval that holds it is refused.
    refused = client.post(
        "/v1/evals", json={"model": done["fine_tuned_model"], "eval_file": upload_eval_problems(client)}
    )
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "eval_set_overlap", refused.text


def test_a_self_training_job_cancelled_while_sampling_stops_within_seconds(client, worker, training_file):
    pool = upload_problems(client, {"relu": DEMO["02_relu"]})
    job = self_training_job(client, training_file, problems_file=pool, samples_per_problem=256, max_new_tokens=512)
    # Reaching sampling is set-up (a worker, the model, the pool), slow on a loaded machine; the
    # behaviour checked is how soon the cancel ends it.
    wait_for(
        lambda: any("sampling" in m for m in event_messages(client, job["id"])), timeout=300, what="round 1 sampling"
    )
    assert client.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel").status_code == 200
    done = finished(client, job["id"], timeout=60)
    assert done["status"] == "cancelled" and done["fine_tuned_model"] is None
    assert done["progress"]["step"] == 0
