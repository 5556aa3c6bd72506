"""The device-sharing protocol (worker/device_share.py) on a real Redis: holders that keep
models on a device release them when a training run asks, and the training run waits for them,
but never for a holder that is gone."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis

from tests.real_service import REDIS_URL
from worker.device_share import POLL_S, STALE_S, DeviceKeys, ModelHolder, request_release
from worker.model_cache import ModelCache


@pytest.fixture()
def client(broker_key_prefix):
    connection = redis.Redis.from_url(f"{REDIS_URL}/1")
    yield connection
    for key in connection.scan_iter(match=f"{broker_key_prefix}share-test:*"):
        connection.delete(key)


@pytest.fixture()
def keys(broker_key_prefix, request) -> DeviceKeys:
    return DeviceKeys.of(f"{broker_key_prefix}share-test:", request.node.name)


@pytest.fixture()
def loaded_cache(tiny_model_dir) -> ModelCache:
    cache = ModelCache()
    with cache.use(str(tiny_model_dir)):
        pass
    assert cache.loaded()["base"], "the fixture holds a model"
    return cache


def _run_holder(holder: ModelHolder) -> threading.Event:
    holder.poll()  # as worker.device_share.hold does: registered before anything is used
    stop = threading.Event()
    threading.Thread(target=holder.run, args=(stop,), daemon=True).start()
    return stop


def test_a_holder_releases_its_models_when_a_training_run_asks(client, keys, loaded_cache):
    stop = _run_holder(ModelHolder(client, keys, loaded_cache, "infer-1"))
    try:
        time.sleep(2 * POLL_S)
        assert json.loads(client.hget(keys.holders, "infer-1"))["loaded"] is True

        assert request_release(client, keys, timeout_s=30) == [], "the holder acknowledged before the timeout"

        assert loaded_cache.loaded() == {"base": [], "adapters": []}
        assert json.loads(client.hget(keys.holders, "infer-1"))["loaded"] is False
    finally:
        stop.set()


def test_release_waits_for_a_generation_in_progress(client, keys, loaded_cache, tiny_model_dir):
    stop = _run_holder(ModelHolder(client, keys, loaded_cache, "infer-busy"))
    in_use = threading.Event()
    finish = threading.Event()

    def generation() -> None:
        with loaded_cache.use(str(tiny_model_dir)):
            in_use.set()
            finish.wait(30)

    worker = threading.Thread(target=generation)
    worker.start()
    try:
        in_use.wait(30)
        time.sleep(2 * POLL_S)
        threading.Timer(2.0, finish.set).start()
        started = time.monotonic()
        assert request_release(client, keys, timeout_s=30) == []
        assert time.monotonic() - started >= 1.5, "the model stayed until the generation using it ended"
        assert loaded_cache.loaded()["base"] == []
    finally:
        finish.set()
        worker.join(30)
        stop.set()


def test_a_silent_holder_is_not_waited_for_and_a_live_one_that_never_answers_times_out(client, keys):
    gone = {"at": time.time() - STALE_S - 5, "loaded": True, "ack": None}
    client.hset(keys.holders, "killed-worker", json.dumps(gone))
    assert request_release(client, keys, timeout_s=5) == []
    assert client.hget(keys.holders, "killed-worker") is None, "a gone holder leaves the device's hash"

    stuck = {"at": time.time() + 60, "loaded": True, "ack": None}  # fresh for the whole wait, never acks
    client.hset(keys.holders, "stuck-worker", json.dumps(stuck))
    started = time.monotonic()
    assert request_release(client, keys, timeout_s=1.5) == ["stuck-worker"]
    waited = time.monotonic() - started
    assert 1.5 <= waited < 30, f"it gave up at its 1.5 s timeout, not at the holder's 60 s freshness ({waited:.1f} s)"
