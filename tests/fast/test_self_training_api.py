"""Self-training jobs (``method.self_training``) through ``create_app`` on the embedded SQLite
database, without a worker: what a create request stores and shows, the fields it is refused for,
and the eval-set checks against leakage at job creation and at eval creation."""

from __future__ import annotations

import time

import pytest

from cuset_core.demo import demo_problems
from db.models import Job
from db.session import session_scope
from tests.integration.job_support import insert_job, job_request, upload_demo_dataset, upload_problems
from tests.sqlite_service import FAST_OWNER, enqueued

DEMO = {p.id: p.problem_code for p in demo_problems()}
# A held-out demo problem (10_softplus), re-commented and re-indented: still the same problem.
SOFTPLUS_AGAIN = "# my own copy\n" + DEMO["10_softplus"].replace("    ", "  ")


@pytest.fixture
def training_file(fast_client) -> str:
    return upload_demo_dataset(fast_client)


@pytest.fixture
def pool(fast_client) -> str:
    """A problems file of two trained demo operations."""
    return upload_problems(fast_client, {"relu": DEMO["02_relu"], "sigmoid": DEMO["06_sigmoid"]})


def self_training(training_file: str, **rounds) -> dict:
    return job_request(training_file, max_steps=2) | {"method": {"type": "cuset", "self_training": rounds}}


def test_a_self_training_job_stores_its_rounds_and_shows_its_problems_file(
    fast_client, fast_settings, training_file, pool
):
    response = fast_client.post(
        "/v1/fine_tuning/jobs",
        json=self_training(training_file, problems_file=pool, rounds=3, samples_per_problem=8, tier="compile"),
    )
    assert response.status_code == 200, response.text
    job = response.json()
    shown = job["method"]["self_training"]
    assert shown["problems_file"] == pool and (shown["rounds"], shown["samples_per_problem"]) == (3, 8)
    assert (shown["tier"], shown["max_kept_per_problem"]) == ("compile", 2)  # a default filled in
    assert job["method"]["type"] == "cuset"
    with session_scope(fast_settings.resolved_database_url) as session:
        row = session.get(Job, job["id"])
        assert row.problems_file == pool and row.spec.self_training.rounds == 3
    assert enqueued(fast_settings) == [("cuset.validate_job_files", [job["id"]])]
    # The problems file is the job's while it exists, like its training file.
    deleted = fast_client.delete(f"/v1/files/{pool}")
    assert (deleted.status_code, deleted.json()["error"]["code"]) == (409, "file_in_use")


# A value the request's schema refuses is invalid_request, as every schema refusal of the API is;
# what only the service can check (files, their purposes) has a code of its own.
@pytest.mark.parametrize(
    ("rounds", "extra", "param", "code"),
    [
        ({"problems_file": "file-nope"}, {}, "method.self_training.problems_file", "file_not_found"),
        ({"problems_file": "TRAINING"}, {}, "method.self_training.problems_file", "invalid_file_purpose"),
        ({"rounds": 0}, {}, "method.self_training.rounds", "invalid_request"),
        ({"tier": "gpu2"}, {}, "method.self_training.tier", "invalid_request"),
        ({"keep_everything": True}, {}, "method.self_training.keep_everything", "invalid_request"),
        ({}, {"validation_file": "TRAINING"}, "validation_file", "invalid_value"),
        ({"eval_problems": "file-nope"}, {}, "method.self_training.eval_problems", "file_not_found"),
    ],
)
def test_a_bad_self_training_request_names_its_field_and_creates_nothing(
    fast_client, fast_settings, training_file, pool, rounds, extra, param, code
):
    given = {"problems_file": pool} | {k: training_file if v == "TRAINING" else v for k, v in rounds.items()}
    body = self_training(training_file, **given) | {k: training_file for k in extra}
    response = fast_client.post("/v1/fine_tuning/jobs", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["code"]) == (param, code), error
    assert fast_client.get("/v1/fine_tuning/jobs").json()["data"] == []
    assert enqueued(fast_settings) == []


def test_a_pool_sharing_a_problem_with_the_eval_set_is_refused_at_creation(fast_client, fast_settings, training_file):
    leaky = upload_problems(fast_client, {"mine": SOFTPLUS_AGAIN, "relu": DEMO["02_relu"]})
    response = fast_client.post(
        "/v1/fine_tuning/jobs",
        json=self_training(training_file, problems_file=leaky, eval_problems="demo:held-out"),
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("eval_set_overlap", "method.self_training.problems_file")
    assert "mine (= 10_softplus)" in error["message"]
    assert enqueued(fast_settings) == []
    # Measured on the trained operations' held-out complement, the same pool is fine.
    clean = upload_problems(fast_client, {"relu": DEMO["02_relu"]})
    body = self_training(training_file, problems_file=clean, eval_problems="demo:held-out")
    assert fast_client.post("/v1/fine_tuning/jobs", json=body).status_code == 200


def test_a_self_trained_model_is_not_measured_on_problems_it_sampled(fast_client, fast_settings, training_file):
    leaky = upload_problems(fast_client, {"mine": SOFTPLUS_AGAIN})
    now = time.time()
    insert_job(
        fast_settings.resolved_database_url,
        training_file,
        id="ftjob-selftrained",
        owner=FAST_OWNER,
        problems_file=leaky,
        status="succeeded",
        fine_tuned_model="ft:tiny:ftjob-selftrained",
        output_dir="jobs/ftjob-selftrained/out/round_1/model",
        created_at=now,
        finished_at=now,
    )
    refused = fast_client.post("/v1/evals", json={"model": "ft:tiny:ftjob-selftrained", "problems": "demo:held-out"})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["param"]) == ("eval_set_overlap", "model")
    assert "10_softplus (= mine)" in error["message"]
    # The base model it started from has sampled nothing: its eval on the same set is queued.
    assert fast_client.post("/v1/evals", json={"model": "tiny", "problems": "demo:held-out"}).status_code == 200
