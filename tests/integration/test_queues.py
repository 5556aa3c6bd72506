"""The train, infer and cpu queues with one real worker process per queue: generation goes on
while a training run holds the train worker, the infer worker drops its cached model when the
training run starts on its device, an eval's verification fans out over the cpu workers while
its progress shows, and messages an older release left on the ``gpu`` queue reach their worker.

The workers and the API here use a broker key prefix of their own, so the run's shared worker
(every queue in one process) never takes their messages.
"""

from __future__ import annotations

import json

import pytest
import redis

from service.dispatch import LEGACY_GPU_QUEUE, TRAIN_QUEUE, make_celery
from tests.integration.job_support import FINISHED, job_request, job_state, upload_demo_dataset
from tests.real_service import REDIS_URL, WorkerProcess, wait_for
from worker.device_share import DeviceKeys, device_key
from worker.legacy_queue import move_legacy_messages


@pytest.fixture(scope="module")
def split_settings(service_settings, tmp_path_factory):
    """The run's settings with queues of their own and an empty verification cache (a cached
    verdict would come back at once, and one cpu worker could then take every problem)."""
    return service_settings.model_copy(
        update={
            "broker_key_prefix": f"{service_settings.broker_key_prefix}split:",
            "verify_cache_dir": tmp_path_factory.mktemp("split-verify-cache"),
        }
    )


@pytest.fixture(scope="module")
def split_client(split_settings, auth_headers):
    from fastapi.testclient import TestClient

    from api.main import create_app

    with TestClient(create_app(split_settings), headers=auth_headers) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def split_workers(split_settings, tmp_path_factory):
    """One worker per queue: train, infer and two on cpu, each a single pool process."""
    workers = {
        name: WorkerProcess(split_settings, tmp_path_factory.mktemp(f"worker-{name}"), queues=queues, concurrency=1)
        for name, queues in (("train", "train"), ("infer", "infer"), ("cpu-a", "cpu"), ("cpu-b", "cpu"))
    }
    try:
        for worker in workers.values():
            worker.start()
        yield workers
    finally:
        for worker in workers.values():
            worker.stop()


def _holders(settings) -> dict[str, dict]:
    client = redis.Redis.from_url(f"{REDIS_URL}/1")
    keys = DeviceKeys.of(settings.broker_key_prefix, device_key())
    return {k.decode(): json.loads(v) for k, v in client.hgetall(keys.holders).items()}


def _generate(client) -> dict:
    response = client.post("/v1/generate", json={"model": "tiny", "prompt": "__global__ void", "max_tokens": 8})
    assert response.status_code == 200, response.text
    return response.json()


def test_generation_goes_on_while_a_training_run_holds_the_train_worker(split_client, split_workers, split_settings):
    assert _generate(split_client)["samples"], "the infer worker serves generation"
    # The holder stamps its state every POLL_S seconds: a fast generation can end before the
    # first stamp that shows the model loaded.
    assert wait_for(
        lambda: any(state["loaded"] for state in _holders(split_settings).values()),
        timeout=10,
        what="the infer worker to show its model loaded",
    ), "and keeps the model loaded"

    training_file = upload_demo_dataset(split_client)
    # Far more steps than the test lasts (it cancels the job): the job must still be training when
    # the generation ends, on a fast machine too.
    job = split_client.post("/v1/fine_tuning/jobs", json=job_request(training_file, max_steps=5000)).json()
    wait_for(lambda: job_state(split_client, job["id"])["status"] == "running", timeout=120, what="training to start")
    # The training run asked the infer worker on its device to let its model go, and it did.
    released = wait_for(
        lambda: (holders := _holders(split_settings)) and all(s["ack"] and not s["loaded"] for s in holders.values()),
        timeout=60,
        what="the infer worker to release its model",
    )
    assert released and "releasing the models on this device" in split_workers["infer"].log()

    generated = _generate(split_client)

    assert generated["samples"] and generated["usage"]["completion_tokens"] > 0
    assert job_state(split_client, job["id"])["status"] == "running", "generation finished while the job trained"
    assert "cuset.generate[" not in split_workers["train"].log() and "cuset.tune[" not in split_workers["infer"].log()
    split_client.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel")
    wait_for(lambda: job_state(split_client, job["id"])["status"] in FINISHED, timeout=120, what="the job to stop")


def test_an_eval_spreads_verification_over_cpu_workers_and_shows_progress(split_client, split_workers):
    # The whole demo set, five problems a batch: each batch's group of five verification tasks
    # goes to whichever cpu worker is free (a worker with one process holds one message at a time).
    request = {"model": "tiny", "samples": 1, "max_tokens": 8, "tier": "static", "problems": "demo", "batch_size": 5}
    created = split_client.post("/v1/evals", json=request)
    assert created.status_code == 200, created.text
    eval_id = created.json()["id"]
    total = created.json()["progress"]["total"]
    seen: list[tuple[int, int, int]] = []  # (generated, done, problem rows listed)

    def finished():
        body = split_client.get(f"/v1/evals/{eval_id}").json()
        listed = len(split_client.get(f"/v1/evals/{eval_id}/problems", params={"limit": 100}).json()["data"])
        seen.append((body["progress"]["generated"], body["progress"]["done"], listed))
        return body if body["status"] not in ("queued", "running") else None

    final = wait_for(finished, timeout=300, interval=0.3, what="the eval to finish")

    assert final["status"] == "succeeded", (final, split_workers["infer"].log()[-2000:])
    assert final["progress"] == {"done": total, "generated": total, "total": total}
    assert final["aggregate"]["problems"] == total
    # Partial results while it ran: some problems verified and listed, others not yet.
    assert any(0 < done <= listed < total for _generated, done, listed in seen), seen
    assert [g for g, _d, _l in seen] == sorted(g for g, _d, _l in seen), "generation progress never goes back"
    assert "cuset.eval[" in split_workers["infer"].log()
    verifying = [name for name in ("cpu-a", "cpu-b") if "cuset.eval_verify[" in split_workers[name].log()]
    assert verifying == ["cpu-a", "cpu-b"], "both cpu workers verified problems"


def test_messages_left_on_the_old_gpu_queue_move_to_their_new_queue(split_settings):
    settings = split_settings.model_copy(update={"broker_key_prefix": f"{split_settings.broker_key_prefix}legacy:"})
    app = make_celery(settings)
    app.send_task("cuset.tune", args=["ftjob-left-behind"], queue=LEGACY_GPU_QUEUE)
    client = redis.Redis.from_url(f"{REDIS_URL}/1")
    prefix = settings.broker_key_prefix
    assert client.llen(f"{prefix}{LEGACY_GPU_QUEUE}") == 1

    assert move_legacy_messages(app) == 1

    assert client.llen(f"{prefix}{LEGACY_GPU_QUEUE}") == 0
    moved = json.loads(client.lindex(f"{prefix}{TRAIN_QUEUE}", 0))
    assert moved["headers"]["task"] == "cuset.tune" and moved["headers"]["argsrepr"] == "['ftjob-left-behind']"
    client.delete(f"{prefix}{TRAIN_QUEUE}")
