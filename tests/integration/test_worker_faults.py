"""Faults of the worker side: a worker killed mid-training, and rows a lost worker left
"running". Whatever happens, a job ends requeued-and-resumed or failed with a reason, never
stuck in "running"."""

from __future__ import annotations

import json
import time

from db.ids import new_id
from db.models import Generation, Job
from db.session import session_scope
from tests.integration.job_support import (
    FINISHED,
    event_messages,
    insert_job,
    job_request,
    job_state,
    upload_short_dataset,
)
from tests.real_service import wait_for
from worker.device_share import STALE_S, DeviceKeys, device_key, redis_for


def test_a_killed_worker_leaves_the_job_resumed_or_failed(client, worker, service_settings):
    job = client.post("/v1/fine_tuning/jobs", json=job_request(upload_short_dataset(client), max_steps=16)).json()
    wait_for(
        lambda: client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints").json()["data"],
        timeout=180,
        what="a first checkpoint",
    )
    worker.kill()  # SIGKILL: the worker, its pool and the training subprocess, no chance to clean up
    assert job_state(client, job["id"])["status"] == "running"
    worker.start()

    done = wait_for(
        lambda: (s := job_state(client, job["id"]))["status"] in FINISHED and s,
        timeout=300,
        what="the job to settle after the kill",
    )
    messages = event_messages(client, job["id"])
    if done["status"] == "succeeded":
        resumed = [m for m in messages if m.startswith("requeued after worker loss; resuming from step")]
        assert resumed, messages
        assert done["progress"]["step"] == 16
        assert (service_settings.artifacts / "jobs" / job["id"] / "out" / "adapter_config.json").is_file()
    else:
        assert done["status"] == "failed" and done["error"]["message"], done


def test_a_job_waiting_for_the_device_is_not_taken_for_a_lost_one(client, worker, service_settings):
    """A training run first waits for the device's other holders to release their models (a long
    generation finishing): longer than the reaper's silence limit here, and the job must not be
    reaped (it has no checkpoint yet, so it would fail as worker_lost)."""
    redis = redis_for(service_settings)
    keys = DeviceKeys.of(service_settings.broker_key_prefix, device_key())
    wait_s = 2 * service_settings.heartbeat_timeout_s + service_settings.reaper_interval_s
    # A holder still loaded and never acknowledging, which goes stale (gone) after ``wait_s``.
    busy = {"at": time.time() - STALE_S + wait_s, "loaded": True, "ack": None}
    redis.hset(keys.holders, "busy-infer-worker", json.dumps(busy))
    try:
        job = client.post("/v1/fine_tuning/jobs", json=job_request(upload_short_dataset(client), max_steps=2)).json()
        done = wait_for(
            lambda: (s := job_state(client, job["id"]))["status"] in FINISHED and s,
            timeout=180 + wait_s,
            what="the job to finish",
        )
    finally:
        redis.hdel(keys.holders, "busy-infer-worker")
    assert done["status"] == "succeeded", done
    assert not [m for m in event_messages(client, job["id"]) if "worker loss" in m]


def _insert_running_job(settings, training_file: str, heartbeat_age_s: float, **values) -> str:
    started = time.time() - heartbeat_age_s
    return insert_job(
        settings.resolved_database_url,
        training_file,
        status="running",
        attempts=1,
        started_at=started,
        heartbeat_at=started,
        **values,
    )


def test_a_silent_job_without_checkpoint_fails_as_worker_lost(client, worker, service_settings):
    job_id = _insert_running_job(service_settings, upload_short_dataset(client), heartbeat_age_s=600)
    done = wait_for(lambda: (s := job_state(client, job_id))["status"] in FINISHED and s, timeout=60, what="the reaper")
    assert done["status"] == "failed" and done["error"]["code"] == "worker_lost"


def test_a_silent_job_with_a_cancel_request_ends_cancelled(client, worker, service_settings):
    job_id = _insert_running_job(
        service_settings, upload_short_dataset(client), heartbeat_age_s=600, cancel_requested=True
    )
    done = wait_for(lambda: (s := job_state(client, job_id))["status"] in FINISHED and s, timeout=60, what="the reaper")
    assert done["status"] == "cancelled"


def test_a_live_job_is_left_alone_by_the_reaper(client, worker, service_settings):
    job_id = _insert_running_job(service_settings, upload_short_dataset(client), heartbeat_age_s=0)
    with session_scope(service_settings.resolved_database_url) as session:
        # Keep the heartbeat fresh for a few reaper periods, as a live worker would.
        for _ in range(int(3 * service_settings.reaper_interval_s / 0.5)):
            session.get(Job, job_id).heartbeat_at = time.time()
            session.commit()
            time.sleep(0.5)
    assert job_state(client, job_id)["status"] == "running"
    with session_scope(service_settings.resolved_database_url) as session:
        session.get(Job, job_id).status = "failed"  # settle it so no later test sees it running


def test_a_generation_stuck_running_is_failed(worker, service_settings):
    gen_id = new_id("gen")
    old = time.time() - service_settings.generation_timeout_s - 60
    with session_scope(service_settings.resolved_database_url) as session:
        session.add(Generation(id=gen_id, model="tiny", kind="generate", request={}, status="running", created_at=old))

    def status():
        with session_scope(service_settings.resolved_database_url) as session:
            row = session.get(Generation, gen_id)
            return row.status == "failed" and row.error.code

    assert wait_for(status, timeout=60, what="the reaper") == "timeout"
