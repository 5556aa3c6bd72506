"""Task bodies called directly, without a Celery worker, on the embedded SQLite database and
broker: the reaper's pass over silent jobs, stuck generations and lost evals; the file check of a
new job; the verification of a ``/v1/generate`` attempt at the static tier. Each task reads its
settings from the process's worker runtime (the ``task_settings`` fixture starts one)."""

from __future__ import annotations

import time

import pytest

from cuset_core.demo import demo_problems
from db.models import Checkpoint, Eval, File, Generation, Job
from db.session import session_scope
from db.settings import Settings
from db.statuses import EvalStatus, GenerationStatus, JobStatus
from service.dispatch import make_celery
from tests.integration.job_support import (
    decoded_generation,
    event_rows,
    insert_eval,
    insert_generation,
    insert_job,
    job_request,
    stored_row,
    stored_samples,
    upload_demo_dataset,
    upload_eval_problems,
)
from tests.sqlite_service import enqueued
from worker.tasks.reaper import reap as reap_task
from worker.tasks.validate import validate_job_files
from worker.tasks.verify import verify_sample

PROBLEM = demo_problems()[0]
SOLVED = f"```python\n{PROBLEM.solution_code}\n```"


# ------------------------------------------------------------------ the reaper


def _running_job(settings: Settings, job_id: str, silent_s: float, checkpoint: bool = False, **values) -> str:
    """A running job (attempt 1) whose heartbeat is ``silent_s`` seconds old."""
    with session_scope(settings.resolved_database_url) as session:
        if session.get(File, "file-train") is None:
            session.add(
                File(id="file-train", filename="t.jsonl", purpose="fine-tune", format="jsonl", bytes=1, path="t")
            )
    insert_job(
        settings.resolved_database_url,
        "file-train",
        id=job_id,
        status=JobStatus.RUNNING,
        attempts=1,
        heartbeat_at=time.time() - silent_s,
        output_dir=f"jobs/{job_id}/out",
        **values,
    )
    if checkpoint:
        (settings.artifacts / "jobs" / job_id / "out" / "checkpoint-4").mkdir(parents=True)
        with session_scope(settings.resolved_database_url) as session:
            session.add(Checkpoint(id=f"ckpt-{job_id}", job_id=job_id, step=4, path=f"jobs/{job_id}/out/checkpoint-4"))
    return job_id


def _generation(settings: Settings, generation_id: str, status: GenerationStatus, age_s: float) -> str:
    return insert_generation(
        settings.resolved_database_url, {}, id=generation_id, status=status, created_at=time.time() - age_s
    )


def _running_eval(settings: Settings, eval_id: str, progress: dict, silent_s: float) -> str:
    return insert_eval(
        settings.resolved_database_url,
        eval_id,
        status=EvalStatus.RUNNING,
        progress=progress,
        heartbeat_at=time.time() - silent_s,
    )


def reap(settings: Settings, *args) -> None:
    """One reaper pass, as beat runs it: the shared task bound to an app on the test's broker
    (the pass also moves messages off the old ``gpu`` queue of that broker)."""
    app = make_celery(settings)
    try:
        app.tasks[reap_task.name].run(*args)
    finally:
        app.close()


def test_the_reaper_requeues_a_silent_job_with_a_checkpoint_and_fails_one_without(task_settings):
    late = 2 * task_settings.heartbeat_timeout_s
    resumable = _running_job(task_settings, "ftjob-resumable", late, checkpoint=True)
    lost = _running_job(task_settings, "ftjob-lost", late)
    live = _running_job(task_settings, "ftjob-live", 1)
    stopping = _running_job(task_settings, "ftjob-stopping", late, cancel_requested=True)

    reap(task_settings)

    assert stored_row(task_settings.resolved_database_url, Job, resumable).status == JobStatus.QUEUED
    assert event_rows(task_settings.resolved_database_url, resumable)[-1] == (
        "warning",
        "requeued after worker loss; resuming from step 4",
    )
    assert enqueued(task_settings) == [("cuset.tune", [resumable])]
    failed = stored_row(task_settings.resolved_database_url, Job, lost)
    assert (failed.status, failed.error.code) == (JobStatus.FAILED, "worker_lost")
    assert stored_row(task_settings.resolved_database_url, Job, live).status == JobStatus.RUNNING
    assert stored_row(task_settings.resolved_database_url, Job, stopping).status == JobStatus.CANCELLED


def test_a_restarted_workers_pass_settles_jobs_not_beaten_since_it_started(task_settings):
    """After a restart a job left ``running`` by the killed service is settled once no worker has
    beaten for it since the restart, long before ``heartbeat_timeout_s``; a live one is kept."""
    started = time.time() - 3
    orphan = _running_job(task_settings, "ftjob-orphan", 5, checkpoint=True)  # last beat before the restart
    live = _running_job(task_settings, "ftjob-beating", 1)  # beaten since

    reap(task_settings, started)

    assert stored_row(task_settings.resolved_database_url, Job, orphan).status == JobStatus.QUEUED
    assert stored_row(task_settings.resolved_database_url, Job, live).status == JobStatus.RUNNING
    assert enqueued(task_settings) == [("cuset.tune", [orphan])]


def test_the_reaper_fails_generations_past_their_timeout_only(task_settings):
    timeout = task_settings.generation_timeout_s
    stuck = _generation(task_settings, "gen-stuck", GenerationStatus.VERIFYING, 2 * timeout)
    young = _generation(task_settings, "gen-young", GenerationStatus.RUNNING, timeout / 2)
    done = _generation(task_settings, "gen-done", GenerationStatus.SUCCEEDED, 2 * timeout)

    reap(task_settings)

    failed = stored_row(task_settings.resolved_database_url, Generation, stuck)
    assert (failed.status, failed.error.code, failed.finished_at is not None) == ("failed", "timeout", True)
    assert stored_row(task_settings.resolved_database_url, Generation, young).status == GenerationStatus.RUNNING
    assert stored_row(task_settings.resolved_database_url, Generation, done).status == GenerationStatus.SUCCEEDED


def test_the_reaper_fails_an_eval_lost_while_generating_but_not_one_being_verified(task_settings):
    late = 2 * task_settings.heartbeat_timeout_s
    generating = _running_eval(task_settings, "eval-generating", {"done": 0, "generated": 2, "total": 4}, late)
    verifying = _running_eval(task_settings, "eval-verifying", {"done": 1, "generated": 4, "total": 4}, late)

    reap(task_settings)

    lost = stored_row(task_settings.resolved_database_url, Eval, generating)
    assert (lost.status, lost.error.code) == (EvalStatus.FAILED, "worker_lost")
    assert stored_row(task_settings.resolved_database_url, Eval, verifying).status == EvalStatus.RUNNING


# ------------------------------------------------------------------ the worker's runtime


def test_a_worker_keeps_tier_2_sides_ahead_of_its_checks_unless_its_settings_turn_that_off(fast_settings):
    from worker.runtime import start_runtime, stop_runtime

    for setting, kept in ((True, True), (False, False)):
        try:
            runtime = start_runtime(fast_settings.model_copy(update={"warm_sides": setting}))
            assert (runtime.warm_sides is not None) is kept
        finally:
            stop_runtime()


# ------------------------------------------------------------------ the file check of a new job


@pytest.fixture
def new_job(fast_client, task_settings):
    """Create a job through the API (it waits in ``validating_files``); call with its hyperparameters."""
    training_file = upload_demo_dataset(fast_client)

    def create(**hyperparameters) -> str:
        body = job_request(training_file)
        body["hyperparameters"] |= hyperparameters
        response = fast_client.post("/v1/fine_tuning/jobs", json=body)
        assert response.status_code == 200, response.text
        return response.json()["id"]

    return create


def test_a_good_training_file_queues_the_job_for_training(new_job, task_settings):
    job_id = new_job()

    validate_job_files.run(job_id)

    assert stored_row(task_settings.resolved_database_url, Job, job_id).status == JobStatus.QUEUED
    assert event_rows(task_settings.resolved_database_url, job_id)[-1] == (
        "info",
        "Validated training file; job queued",
    )
    assert enqueued(task_settings)[-1] == ("cuset.tune", [job_id])


def test_a_file_without_a_usable_record_fails_the_job_naming_the_file(new_job, task_settings):
    # Every demo record is longer than 64 tokens, so none survives the limit.
    job_id = new_job(max_seq_len=64)

    validate_job_files.run(job_id)

    job = stored_row(task_settings.resolved_database_url, Job, job_id)
    assert (job.status, job.error.code, job.error.param) == (JobStatus.FAILED, "invalid_file", "training_file")
    assert "no usable record" in job.error.message and "max_seq_len 64" in job.error.message
    assert [name for name, _ in enqueued(task_settings)] == ["cuset.validate_job_files"]


def test_a_redelivered_check_of_a_cancelled_job_does_nothing(new_job, fast_client, task_settings):
    job_id = new_job()
    fast_client.post(f"/v1/fine_tuning/jobs/{job_id}/cancel")

    validate_job_files.run(job_id)

    assert stored_row(task_settings.resolved_database_url, Job, job_id).status == JobStatus.CANCELLED
    assert [name for name, _ in enqueued(task_settings)] == ["cuset.validate_job_files"]


# ------------------------------------------------------------------ verification of /v1/generate attempts


def _decoded(settings: Settings, answers: list[str], stop_at_first_pass: bool, repair_rounds: int = 0) -> str:
    """A /v1/generate row whose drawn attempts are ``answers``, decoded and waiting for the static tier."""
    return decoded_generation(
        settings.resolved_database_url,
        settings.base_models["tiny"],
        answers,
        stop_at_first_pass=stop_at_first_pass,
        repair_rounds=repair_rounds,
    )


def test_a_passing_attempt_ends_a_first_pass_request_and_cancels_the_rest(task_settings):
    generation_id = _decoded(task_settings, ["no kernel here", SOLVED, "nor here"], stop_at_first_pass=True)

    verify_sample.run(generation_id, 1)

    row = stored_row(task_settings.resolved_database_url, Generation, generation_id)
    samples = stored_samples(task_settings.resolved_database_url, generation_id)
    assert row.status == GenerationStatus.SUCCEEDED and row.finished_at is not None
    assert (samples[1].verification.verdict, samples[1].verification.tier) == ("pass", "static")
    assert [(s.cancelled, s.verification) for s in (samples[0], samples[2])] == [(True, None), (True, None)]
    verify_sample.run(generation_id, 0)  # a message arriving after the end finds nothing to do
    assert stored_samples(task_settings.resolved_database_url, generation_id) == samples


def test_a_task_takes_its_settings_from_the_runtime_never_from_the_environment(task_settings, monkeypatch, tmp_path):
    generation_id = _decoded(task_settings, [SOLVED], stop_at_first_pass=False)
    elsewhere = tmp_path / "another-service"
    monkeypatch.setenv("CUSET_DATA_DIR", str(elsewhere))  # what a task reading its environment would use
    monkeypatch.setenv("CUSET_DATABASE_URL", f"sqlite:///{elsewhere}/cuset.sqlite")

    verify_sample.run(generation_id, 0)

    assert stored_samples(task_settings.resolved_database_url, generation_id)[0].verification.verdict == "pass"
    assert not elsewhere.exists()


@pytest.mark.slow
def test_a_workers_next_tier_2_check_takes_the_sides_its_last_one_left_started(task_settings):
    from worker.runtime import process_runtime

    generation_id = decoded_generation(
        task_settings.resolved_database_url,
        task_settings.base_models["tiny"],
        [SOLVED, SOLVED.replace("```python\n", "```python\n# the same kernel, another answer\n", 1)],
        stop_at_first_pass=False,
        verify="cpu",
    )  # two answers: the second is not the first's cached result
    warm = process_runtime().warm_sides
    verify_sample.run(generation_id, 0)
    deadline = time.monotonic() + 60
    while len(warm.waiting()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    verify_sample.run(generation_id, 1)

    samples = stored_samples(task_settings.resolved_database_url, generation_id)
    assert [(s.verification.verdict, s.verification.tier) for s in samples] == [("pass", "cpu")] * 2
    assert warm.taken == 2  # the second check's reference side and candidate side


def test_a_task_in_a_process_without_a_runtime_says_how_to_start_one():
    with pytest.raises(RuntimeError, match="start_runtime"):
        verify_sample.run("gen-anything", 0)


def test_a_failing_attempt_gets_a_repair_queued_for_decoding(task_settings):
    generation_id = _decoded(task_settings, ["no kernel here"], stop_at_first_pass=False, repair_rounds=1)

    verify_sample.run(generation_id, 0)

    row = stored_row(task_settings.resolved_database_url, Generation, generation_id)
    samples = stored_samples(task_settings.resolved_database_url, generation_id)
    assert row.status == GenerationStatus.VERIFYING
    assert samples[0].verification.verdict == "no_code"
    assert (len(samples), samples[1].round, samples[1].repair_of) == (2, 1, 0)
    assert enqueued(task_settings) == [("cuset.generate_repair", [generation_id, 1])]
    verify_sample.run(generation_id, 0)  # a redelivery of a settled attempt adds nothing
    assert len(stored_samples(task_settings.resolved_database_url, generation_id)) == 2


def test_the_file_check_counts_records_in_the_jobs_own_prompt_style_as_the_files_fit_does(fast_client, task_settings):
    import json

    from cuset_core.demo import demo_problems
    from cuset_core.generation.prompts import prompt_for

    # KernelBench-table rows: a compact job rebuilds each prompt from the problem (shorter); a
    # kernelbench job keeps the long prompt, and at 1,400 tokens none of its records fits.
    rows = [{"question": prompt_for(p.problem_code, "kernelbench"), "answer": p.solution_code} for p in demo_problems()]
    content = "".join(json.dumps(row) + "\n" for row in rows).encode()
    uploaded = fast_client.post("/v1/files", files={"file": ("qa.jsonl", content)}, data={"purpose": "fine-tune"})
    training_file = uploaded.json()["id"]
    url = task_settings.resolved_database_url

    def fit(style: str) -> int:
        params = {"model": "tiny", "max_seq_len": 1400, "prompt_style": style}
        return fast_client.get(f"/v1/files/{training_file}/fit", params=params).json()["fit"]

    def checked(style: str) -> str:
        body = job_request(training_file, prompt_style=style)
        body["hyperparameters"]["max_seq_len"] = 1400
        job_id = fast_client.post("/v1/fine_tuning/jobs", json=body).json()["id"]
        validate_job_files.run(job_id)
        return job_id

    compact, kernelbench = checked("compact"), checked("kernelbench")
    assert 0 < fit("compact") < 50 and fit("kernelbench") == 0
    usable = [m for _, m in event_rows(url, compact) if m.endswith("records usable")]
    assert usable == [f"training_file: {fit('compact')} of 50 records usable"]
    job = stored_row(url, Job, kernelbench)
    assert (job.status, job.error.code) == (
        JobStatus.FAILED,
        "invalid_file",
    ) and "max_seq_len 1400" in job.error.message


def test_a_files_fit_needs_a_model_the_owner_may_use_and_a_training_file(fast_client):
    training_file = upload_demo_dataset(fast_client)
    unknown = fast_client.get(f"/v1/files/{training_file}/fit", params={"model": "gpt-17"})
    assert (unknown.status_code, unknown.json()["error"]["param"]) == (404, "model")
    problems = upload_eval_problems(fast_client)
    refused = fast_client.get(f"/v1/files/{problems}/fit", params={"model": "tiny"})
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_file_purpose")
    roomy = fast_client.get(f"/v1/files/{training_file}/fit", params={"model": "tiny", "max_seq_len": 8192}).json()
    assert roomy["fit"] == roomy["records"] and roomy["over_lines"] == []
