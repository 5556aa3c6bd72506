"""Sharing one device between a training run and the models kept for generation.

A host runs a ``train`` worker and an ``infer`` worker per GPU (docs/deploy.md): separate
processes, often separate containers, that see the same device. Generation keeps its models
loaded between requests (worker/model_cache.py); before a training run starts on the device,
they must leave it. The protocol, through Redis (the broker's, or ``settings.redis_url``):

- every process that keeps models on a device is a *holder*: a thread in it stamps
  ``{"at", "loaded", "ack"}`` under its id in the device's ``holders`` hash every
  ``POLL_S`` seconds, and reads the device's ``request`` key;
- a training task writes a new request id there and waits until every holder with a fresh
  stamp has acknowledged it (``ack``) or holds nothing (``loaded`` false);
- a holder that sees a new request id releases its models (``ModelCache.release``, which
  waits for a generation in progress to finish) and then acknowledges it.

Polling a key rather than a pub/sub message: a holder that was busy or reconnecting when the
request came still sees it. A holder killed outright stops stamping and is ignored after
``STALE_S``. Generation after the release may load a model again; it then shares the device
with the training run (small models fit beside it; a big one belongs on a GPU without a train
worker). Without Redis (the embedded SQLite broker: one worker, one machine), a training task
releases its own process's models only.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass

import redis

from db.settings import Settings
from worker.model_cache import ModelCache

log = logging.getLogger(__name__)

POLL_S = 0.5  # how often a holder looks for a request and stamps its state
STALE_S = 10.0  # a holder silent this long is gone (killed); its models went with it


def device_key() -> str:
    """What names this process's device on every host: the UUIDs of the GPUs it sees (the same
    in every container given that GPU), else the CPU of this host."""
    import torch

    host = socket.gethostname()
    if torch.cuda.is_available():
        return ",".join(
            str(getattr(torch.cuda.get_device_properties(i), "uuid", None) or f"cuda{i}@{host}")
            for i in range(torch.cuda.device_count())
        )
    return f"cpu@{host}"


@dataclass(frozen=True)
class DeviceKeys:
    """The Redis keys of one device: the latest release request and the holders' hash."""

    request: str
    holders: str

    @classmethod
    def of(cls, prefix: str, device: str) -> DeviceKeys:
        return cls(request=f"{prefix}cuset:device:{device}:release", holders=f"{prefix}cuset:device:{device}:holders")


class ModelHolder:
    """One process's side of the protocol: ``poll`` starts releasing on a new request and
    stamps the state. The release runs in a thread of its own because it waits for a generation
    in progress; meanwhile the stamps go on (still loaded, not acknowledged), so the training
    run keeps waiting for this holder rather than taking it for gone."""

    def __init__(self, client: redis.Redis, keys: DeviceKeys, cache: ModelCache, holder_id: str) -> None:
        self.client, self.keys, self.cache, self.holder_id = client, keys, cache, holder_id
        self._seen: str | None = None
        self._acked: str | None = None

    def poll(self) -> None:
        request = self.client.get(self.keys.request)
        request = _text(request) if request is not None else None
        if request is not None and request != self._seen:
            self._seen = request
            threading.Thread(target=self._release, args=(request,), name="cuset-release", daemon=True).start()
        state = {"at": time.time(), "loaded": self.cache.holds_model, "ack": self._acked}
        self.client.hset(self.keys.holders, self.holder_id, json.dumps(state))

    def _release(self, request: str) -> None:
        if self.cache.holds_model:
            log.info("releasing the models on this device for a training run (request %s)", request)
        self.cache.release()  # waits for a generation that is using the model
        self._acked = request

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.poll()
            except redis.RedisError:
                log.warning("device share: Redis unreachable; retrying", exc_info=True)
            stop.wait(POLL_S)


def still_loaded(client: redis.Redis, keys: DeviceKeys, request: str, now: float) -> list[str]:
    """Holders with a fresh stamp that keep models loaded and have not acknowledged ``request``;
    holders gone silent are dropped from the device's hash (a live one stamps again at once)."""
    waiting = []
    for holder, raw in client.hgetall(keys.holders).items():
        state = json.loads(raw)
        if now - state["at"] > STALE_S:
            client.hdel(keys.holders, holder)
        elif state["loaded"] and state["ack"] != request:
            waiting.append(_text(holder))
    return waiting


def request_release(client: redis.Redis, keys: DeviceKeys, timeout_s: float) -> list[str]:
    """Ask every holder of the device to release its models and wait for them; returns the
    holders that still held models after ``timeout_s`` seconds (empty: the device is free)."""
    request = uuid.uuid4().hex
    client.set(keys.request, request, ex=24 * 3600)
    deadline = time.monotonic() + timeout_s
    while waiting := still_loaded(client, keys, request, time.time()):
        if time.monotonic() >= deadline:
            return waiting
        time.sleep(POLL_S / 2)
    return []


def _text(value: bytes | str) -> str:
    """A Redis reply as text (our clients return bytes)."""
    return value.decode() if isinstance(value, bytes) else value


def redis_for(settings: Settings) -> redis.Redis | None:
    url = settings.resolved_redis_url
    return redis.Redis.from_url(url) if url else None


# This process's holder threads, one per Redis and device: a holder lives as long as the process
# (its models do too), so the registry is the process's, not a task's.
_holding: dict[tuple[str | None, str], threading.Event] = {}
_holding_lock = threading.Lock()


def hold(settings: Settings, cache: ModelCache) -> None:
    """Make this process a holder of its device (once; a thread for the process's lifetime),
    so that a training run on the device can ask it to release ``cache``."""
    client = redis_for(settings)
    if client is None:
        return
    keys = DeviceKeys.of(settings.broker_key_prefix, device_key())
    registered = (settings.resolved_redis_url, keys.holders)
    with _holding_lock:
        if registered in _holding:
            return
        stop = threading.Event()
        _holding[registered] = stop
    holder = ModelHolder(client, keys, cache, f"{socket.gethostname()}:{os.getpid()}")
    try:
        holder.poll()  # known to the device before the caller loads anything
    except redis.RedisError:
        log.warning("device share: Redis unreachable; the holder thread keeps trying", exc_info=True)
    threading.Thread(target=holder.run, args=(stop,), name="cuset-device-holder", daemon=True).start()


def free_device(settings: Settings, cache: ModelCache) -> list[str]:
    """Release this process's models and ask every other holder of the device to release
    theirs, waiting up to ``settings.model_release_timeout_s``; returns the holders that did
    not (the training run starts anyway: it is never held up for longer than that)."""
    cache.release()
    client = redis_for(settings)
    if client is None:
        return []
    keys = DeviceKeys.of(settings.broker_key_prefix, device_key())
    try:
        waiting = request_release(client, keys, settings.model_release_timeout_s)
    except redis.RedisError:
        log.warning("device share: Redis unreachable; training starts without asking for the device", exc_info=True)
        return []
    if waiting:
        log.warning("holders %s kept their models on this device; training starts beside them", waiting)
    return waiting
