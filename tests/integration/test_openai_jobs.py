"""The official ``openai`` client against the real server: fine_tuning.jobs create, retrieve,
list, cancel and list_events behave as OpenAI's do."""

from __future__ import annotations

import openai
import pytest

from tests.integration.job_support import FINISHED, MAX_SEQ_LEN, short_dataset_bytes
from tests.real_service import wait_for


@pytest.fixture()
def sdk(server, api_key) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key=api_key, max_retries=0)


@pytest.fixture()
def training_file(sdk) -> str:
    return sdk.files.create(file=("short.jsonl", short_dataset_bytes()), purpose="fine-tune").id


def create_job(sdk, training_file: str, max_steps: int):
    return sdk.fine_tuning.jobs.create(
        model="tiny",
        training_file=training_file,
        suffix="sdk",
        seed=7,
        metadata={"origin": "openai-client"},
        method={"type": "supervised", "supervised": {"hyperparameters": {"batch_size": 2, "n_epochs": 1}}},
        # Ours besides OpenAI's three; the client passes unknown keys through.
        hyperparameters={"max_steps": max_steps, "save_steps": 2, "max_seq_len": MAX_SEQ_LEN},
    )


def test_create_retrieve_list_and_events(sdk, worker, training_file):
    job = create_job(sdk, training_file, max_steps=4)
    assert job.object == "fine_tuning.job" and job.status == "validating_files"
    assert job.model == "tiny" and job.seed == 7 and job.metadata == {"origin": "openai-client"}
    assert job.hyperparameters.batch_size == 2 and job.method.type == "sft"

    done = wait_for(
        lambda: (j := sdk.fine_tuning.jobs.retrieve(job.id)).status in FINISHED and j, timeout=180, what="job end"
    )
    assert done.status == "succeeded", done.error
    assert done.fine_tuned_model == f"ft:tiny:sdk:{job.id}" and done.trained_tokens > 0

    listed = [j.id for j in sdk.fine_tuning.jobs.list(limit=2)]  # auto-pages with after
    assert job.id in listed and len(listed) == len(set(listed))

    events = list(sdk.fine_tuning.jobs.list_events(job.id, limit=5))
    assert events[0].message == "The job has successfully completed" and events[-1].message == "Job created"
    assert all(event.object == "fine_tuning.job.event" for event in events)


def test_cancel_and_cancel_again(sdk, worker, training_file):
    job = create_job(sdk, training_file, max_steps=400)
    cancelled = sdk.fine_tuning.jobs.cancel(job.id)
    assert cancelled.id == job.id and cancelled.status in ("cancelled", "running")
    done = wait_for(
        lambda: (j := sdk.fine_tuning.jobs.retrieve(job.id)).status in FINISHED and j, timeout=120, what="cancellation"
    )
    assert done.status == "cancelled"
    with pytest.raises(openai.ConflictError) as raised:
        sdk.fine_tuning.jobs.cancel(job.id)
    assert raised.value.code == "job_not_cancellable"


def test_unknown_job_is_not_found(sdk):
    with pytest.raises(openai.NotFoundError):
        sdk.fine_tuning.jobs.retrieve("ftjob-does-not-exist")
