"""``/v1/fine_tuning/jobs`` through ``create_app`` on the embedded SQLite database, without a
worker: a created job waits in ``validating_files`` with its message in the SQLite broker, bad
requests name their field, a job not yet running cancels at once, and lists page by cursor."""

from __future__ import annotations

import time

import pytest

from db.models import Checkpoint, Job, JobMetric
from db.session import session_scope
from tests.integration.job_support import (
    event_messages,
    insert_job,
    job_request,
    upload_demo_dataset,
    upload_eval_problems,
)
from tests.sqlite_service import FAST_OWNER, OTHER_OWNER, enqueued


@pytest.fixture
def training_file(fast_client) -> str:
    return upload_demo_dataset(fast_client)


def created(client, body: dict) -> dict:
    response = client.post("/v1/fine_tuning/jobs", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_created_job_waits_for_its_file_check_in_the_broker(fast_client, fast_settings, training_file):
    job = created(fast_client, job_request(training_file))
    assert (job["status"], job["model"], job["training_file"]) == ("validating_files", "tiny", training_file)
    assert job["method"]["type"] == "cuset" and job["hyperparameters"]["max_steps"] == 8
    assert enqueued(fast_settings) == [("cuset.validate_job_files", [job["id"]])]
    assert event_messages(fast_client, job["id"]) == ["Job created"]
    assert fast_client.get(f"/v1/fine_tuning/jobs/{job['id']}").json() == job


@pytest.mark.parametrize(
    ("change", "status", "param"),
    [
        ({"training_file": "file-nope"}, 400, "training_file"),
        ({"method": {"type": "cuset", "mask_ratio": 1.5}}, 400, "method.mask_ratio"),
        ({"method": {"type": "magic"}}, 400, "method.type"),
        ({"method": {"type": "cuset", "no_such_knob": 1}}, 400, "method.no_such_knob"),
        ({"hyperparameters": {"n_epochs": 0}}, 400, "hyperparameters.n_epochs"),
        ({"hyperparameters": {"batch_size": "many"}}, 400, "hyperparameters.batch_size"),
        ({"hyperparameters": {"lora_rank": 0}}, 400, "hyperparameters.lora_rank"),
        ({"hyperparameters": {"warp_speed": 9}}, 400, "hyperparameters.warp_speed"),
        ({"hyperparameters": {"n_epochs": 10**6}}, 400, "hyperparameters.n_epochs"),
        ({"hyperparameters": {"max_steps": 10**9}}, 400, "hyperparameters.max_steps"),
        ({"hyperparameters": {"max_seq_len": 10**7}}, 400, "hyperparameters.max_seq_len"),
        ({"hyperparameters": {"batch_size": 10**6}}, 400, "hyperparameters.batch_size"),
        ({"hyperparameters": {"lora_rank": 65536}}, 400, "hyperparameters.lora_rank"),
        ({"hyperparameters": {"lora": {"rank": 0}}}, 400, "hyperparameters.lora.rank"),
        ({"hyperparameters": {"learning_rate_multiplier": 0}}, 400, "hyperparameters.learning_rate_multiplier"),
        ({"hyperparameters": {"epochs": 2}}, 400, "hyperparameters.epochs"),  # OpenAI's name is n_epochs
        ({"method": {"type": "cuset", "supervised": {}}}, 400, "method"),
        (
            {"method": {"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": -1}}}},
            400,
            "method.supervised.hyperparameters.n_epochs",
        ),
        ({"suffix": "Has Spaces"}, 400, "suffix"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, 400, "metadata"),
        ({"seed": -1}, 400, "seed"),
    ],
)
def test_a_bad_request_names_its_field_and_creates_nothing(
    fast_client, fast_settings, training_file, change, status, param
):
    response = fast_client.post("/v1/fine_tuning/jobs", json=job_request(training_file) | change)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]
    assert fast_client.get("/v1/fine_tuning/jobs").json()["data"] == []
    assert enqueued(fast_settings) == []


def test_openai_auto_takes_the_default_and_the_multiplier_scales_the_default_learning_rate(fast_client, training_file):
    auto = {"n_epochs": "auto", "batch_size": "auto", "learning_rate_multiplier": "auto"}
    defaults = created(fast_client, job_request(training_file) | {"hyperparameters": auto})["hyperparameters"]
    doubled = created(fast_client, job_request(training_file) | {"hyperparameters": {"learning_rate_multiplier": 2}})
    assert (defaults["n_epochs"], defaults["batch_size"], defaults["learning_rate_multiplier"]) == (1.0, 4, 1.0)
    assert doubled["hyperparameters"]["learning_rate"] == 2 * defaults["learning_rate"]


def test_the_method_s_nested_hyperparameters_win_over_the_request_s_own(fast_client, training_file):
    body = job_request(training_file) | {
        "hyperparameters": {"batch_size": 2, "lora_rank": 8},
        "method": {"type": "supervised", "supervised": {"hyperparameters": {"batch_size": 1}}},
    }
    job = created(fast_client, body)
    assert (job["method"]["type"], job["hyperparameters"]["batch_size"]) == ("sft", 1)
    assert job["hyperparameters"]["lora"]["rank"] == 8


def test_the_api_schema_shows_every_knob_a_job_takes(fast_client):
    schemas = fast_client.get("/openapi.json").json()["components"]["schemas"]
    hyperparameters = schemas["HyperparametersRequest"]["properties"]
    assert {"n_epochs", "learning_rate_multiplier", "lora", "lora_rank", "save_steps", "max_steps"} <= set(
        hyperparameters
    )
    assert hyperparameters["n_epochs"]["maximum"] == 100
    assert {"type", "mask_ratio", "supervised", "self_training"} <= set(schemas["MethodRequest"]["properties"])


def test_an_eval_file_cannot_be_a_training_file(fast_client):
    response = fast_client.post("/v1/fine_tuning/jobs", json=job_request(upload_eval_problems(fast_client)))
    assert response.status_code == 400
    assert (response.json()["error"]["param"], response.json()["error"]["code"]) == (
        "training_file",
        "invalid_file_purpose",
    )


def test_a_job_is_tuned_on_the_prompt_style_it_names_compact_by_default(fast_client, fast_settings, training_file):
    assert created(fast_client, job_request(training_file))["prompt_style"] == "compact"
    job = created(fast_client, job_request(training_file, prompt_style="kernelbench"))
    assert job["prompt_style"] == "kernelbench"
    with session_scope(fast_settings.resolved_database_url) as session:
        assert session.get(Job, job["id"]).spec.prompt_style == "kernelbench"


def test_a_job_not_yet_running_is_cancelled_at_once_and_only_once(fast_client, training_file):
    job = created(fast_client, job_request(training_file))
    cancelled = fast_client.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel").json()
    assert cancelled["status"] == "cancelled" and cancelled["finished_at"] is not None
    assert event_messages(fast_client, job["id"])[-1] == "Job cancelled"
    again = fast_client.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel")
    assert again.status_code == 409 and again.json()["error"]["code"] == "job_not_cancellable"


def test_a_running_job_answers_cancelling_at_once_until_its_worker_stops_it(fast_client, fast_settings, training_file):
    job_id = insert_job(
        fast_settings.resolved_database_url, training_file, owner=FAST_OWNER, status="running", attempts=1,
        step=3, total_steps=8, estimated_finish=time.time() + 60,
    )  # fmt: skip
    answer = fast_client.post(f"/v1/fine_tuning/jobs/{job_id}/cancel")
    assert answer.status_code == 200
    assert answer.json()["status"] == "cancelling" and answer.json()["estimated_finish"] is None
    assert fast_client.get(f"/v1/fine_tuning/jobs/{job_id}").json()["status"] == "cancelling"
    assert event_messages(fast_client, job_id)[0] == "Cancellation requested; stopping"
    # Still unfinished: it counts against the owner's unfinished jobs, and a second cancel is no error.
    assert fast_client.post(f"/v1/fine_tuning/jobs/{job_id}/cancel").json()["status"] == "cancelling"


def test_the_same_idempotency_key_answers_with_the_same_job(fast_client, fast_settings, training_file):
    body = job_request(training_file, suffix="idem")
    first, second = (created_with_key(fast_client, body, "key-1") for _ in range(2))
    assert first.json()["id"] == second.json()["id"]
    assert len(enqueued(fast_settings)) == 1
    other = created_with_key(fast_client, body | {"suffix": "other"}, "key-1")
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_key_reused"


def created_with_key(client, body: dict, key: str):
    return client.post("/v1/fine_tuning/jobs", json=body, headers={"Idempotency-Key": key})


def test_more_unfinished_jobs_than_allowed_is_a_429_until_one_ends(fast_client, fast_settings, training_file):
    ids = [created(fast_client, job_request(training_file))["id"] for _ in range(fast_settings.max_concurrent_jobs)]
    response = fast_client.post("/v1/fine_tuning/jobs", json=job_request(training_file))
    assert response.status_code == 429 and response.json()["error"]["code"] == "concurrent_jobs_limit"
    fast_client.post(f"/v1/fine_tuning/jobs/{ids[0]}/cancel")
    created(fast_client, job_request(training_file))


def test_jobs_and_events_page_newest_first_by_cursor(fast_client, fast_settings, training_file):
    ids = [created(fast_client, job_request(training_file))["id"] for _ in range(fast_settings.max_concurrent_jobs)]
    seen, after = [], None
    while True:
        page = fast_client.get("/v1/fine_tuning/jobs", params={"limit": 2} | ({"after": after} if after else {})).json()
        assert len(page["data"]) <= 2
        seen += [job["id"] for job in page["data"]]
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert seen == ids[::-1]

    fast_client.post(f"/v1/fine_tuning/jobs/{ids[0]}/cancel")
    newest = fast_client.get(f"/v1/fine_tuning/jobs/{ids[0]}/events", params={"limit": 1}).json()
    assert [e["message"] for e in newest["data"]] == ["Job cancelled"] and newest["has_more"]
    older = fast_client.get(
        f"/v1/fine_tuning/jobs/{ids[0]}/events", params={"limit": 1, "after": newest["last_id"]}
    ).json()
    assert [e["message"] for e in older["data"]] == ["Job created"] and not older["has_more"]
    unknown = fast_client.get("/v1/fine_tuning/jobs", params={"after": "ftjob-nope"})
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "after"


def test_another_owners_job_is_a_404_like_an_unknown_one(fast_client, fast_settings, training_file):
    insert_job(fast_settings.resolved_database_url, training_file, id="ftjob-theirs", owner=OTHER_OWNER)
    for job_id in ("ftjob-unknown", "ftjob-theirs"):
        for method, suffix in (
            ("GET", ""),
            ("GET", "/events"),
            ("GET", "/checkpoints"),
            ("GET", "/metrics"),
            ("POST", "/cancel"),
        ):
            response = fast_client.request(method, f"/v1/fine_tuning/jobs/{job_id}{suffix}")
            assert response.status_code == 404, (method, suffix)
            error = response.json()["error"]
            assert (error["type"], error["code"]) == ("not_found_error", "fine_tuning_job_not_found")
    assert fast_client.get("/v1/fine_tuning/jobs").json()["data"] == []


def test_checkpoints_page_by_step_and_metrics_drop_values_json_cannot_hold(fast_client, fast_settings, training_file):
    job_id = created(fast_client, job_request(training_file, suffix="kb"))["id"]
    with session_scope(fast_settings.resolved_database_url) as session:
        for step in (2, 4, 6):
            session.add(Checkpoint(id=f"ckpt-{step}", job_id=job_id, step=step, path="x", metrics={"loss": 1 / step}))
            session.add(JobMetric(job_id=job_id, step=step, values={"loss": 1 / step, "grad_norm": float("nan")}))
    newest = fast_client.get(f"/v1/fine_tuning/jobs/{job_id}/checkpoints", params={"limit": 2}).json()
    assert [c["step_number"] for c in newest["data"]] == [6, 4] and newest["has_more"]
    assert newest["data"][0]["fine_tuned_model_checkpoint"] == f"ft:tiny:kb:{job_id}:ckpt-step-6"
    assert newest["data"][0]["metrics"] == {"step": 6, "loss": 1 / 6}
    rest = fast_client.get(f"/v1/fine_tuning/jobs/{job_id}/checkpoints", params={"after": newest["last_id"]}).json()
    assert [c["step_number"] for c in rest["data"]] == [2] and not rest["has_more"]

    series = fast_client.get(f"/v1/fine_tuning/jobs/{job_id}/metrics", params={"after_step": 2, "limit": 1}).json()
    assert (series["data"], series["has_more"]) == ([{"step": 4, "loss": 0.25}], True)


def test_a_running_jobs_estimated_finish_stays_put_between_steps_while_its_eta_counts_down(
    fast_client, fast_settings, training_file
):
    finish = time.time() + 600.0  # recorded with the last step: that step's time + its eta
    job_id = insert_job(
        fast_settings.resolved_database_url,
        training_file,
        owner=FAST_OWNER,
        status="running",
        step=2,
        total_steps=8,
        eta_s=600.0,
        estimated_finish=finish,
    )

    first = fast_client.get(f"/v1/fine_tuning/jobs/{job_id}").json()
    time.sleep(1.1)
    later = fast_client.get(f"/v1/fine_tuning/jobs/{job_id}").json()

    assert first["estimated_finish"] == later["estimated_finish"] == int(finish)
    assert 0 < later["progress"]["eta_s"] < first["progress"]["eta_s"] <= 600.0


def test_a_kept_checkpoint_of_a_cancelled_job_is_a_model_of_its_owner(fast_client, fast_settings, training_file):
    job_id = insert_job(fast_settings.resolved_database_url, training_file, owner=FAST_OWNER, status="cancelled")
    folder = fast_settings.artifacts / "jobs" / job_id / "out" / "checkpoint-2"
    folder.mkdir(parents=True)
    with session_scope(fast_settings.resolved_database_url) as session:
        session.add(Checkpoint(id="ckpt-a", job_id=job_id, step=2, path=f"jobs/{job_id}/out/checkpoint-2"))
        session.add(
            Checkpoint(id="ckpt-b", job_id=job_id, step=4, path=f"jobs/{job_id}/out/checkpoint-4")
        )  # rotated away
    [listed, _] = fast_client.get(f"/v1/fine_tuning/jobs/{job_id}/checkpoints").json()["data"][::-1]
    name = listed["fine_tuned_model_checkpoint"]
    assert name == f"ft:tiny::{job_id}:ckpt-step-2"

    # OpenAI's shape: a job tunes further from the checkpoint named as its model.
    further = fast_client.post("/v1/fine_tuning/jobs", json=job_request(training_file) | {"model": name})
    assert further.status_code == 200, further.text
    assert further.json()["model"] == name
    # Every model id chat serves, /v1/models lists and gets; the id from before 0010 still names it.
    assert name in [model["id"] for model in fast_client.get("/v1/models").json()["data"]]
    for asked in (name, f"ft:tiny:{job_id}:ckpt-step-2"):
        got = fast_client.get(f"/v1/models/{asked}")
        assert got.status_code == 200, got.text
        assert (got.json()["id"], got.json()["owned_by"], got.json()["source"]) == (name, FAST_OWNER, "adapter")
    for unusable in (
        f"ft:tiny::{job_id}:ckpt-step-4",
        f"ft:tiny::{job_id}:ckpt-step-3",
        f"ft:tiny:kb:{job_id}:ckpt-step-2",
    ):
        refused = fast_client.post("/v1/fine_tuning/jobs", json=job_request(training_file) | {"model": unusable})
        assert (refused.status_code, refused.json()["error"]["code"]) == (404, "model_not_found"), unusable
        assert fast_client.get(f"/v1/models/{unusable}").status_code == 404
    with session_scope(fast_settings.resolved_database_url) as session:
        from db.model_specs import checkpoint_folder

        assert checkpoint_folder(session, fast_settings, FAST_OWNER, name) == folder
        assert checkpoint_folder(session, fast_settings, OTHER_OWNER, name) is None
