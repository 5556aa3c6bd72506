"""Streaming through Redis pub/sub: the real worker publishes each text delta of a streamed
generation on the row's channel, the API turns them into server-sent events, and the row itself
is written only about once a second while decoding (then in full at the end)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
from sqlalchemy import select, text

from api.streaming import follow
from db.models import Generation
from db.session import session_scope
from service.generation_events import GenerationEvent
from service.generation_records import FLUSH_S, ROW_FLUSH_S
from tests.integration.job_support import stored_samples
from tests.integration.test_inference import sse_events
from tests.real_service import wait_for

LONG = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 400, "temperature": 0}


class ChannelRecorder:
    """Every event published on any generation channel of this run, in arrival order."""

    def __init__(self, settings) -> None:
        self._pubsub = redis.Redis.from_url(settings.resolved_redis_url).pubsub()
        self._pubsub.psubscribe(f"{settings.broker_key_prefix}cuset:generation:*")
        self.events: list[tuple[str, GenerationEvent]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self._pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
            if message is not None:
                generation_id = message["channel"].decode().rsplit(":", 1)[1]
                self.events.append((generation_id, GenerationEvent.model_validate_json(message["data"])))

    def of(self, generation_id: str) -> list[GenerationEvent]:
        return [event for gid, event in self.events if gid == generation_id]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._pubsub.close()


@pytest.fixture()
def channels(service_settings) -> Iterator[ChannelRecorder]:
    recorder = ChannelRecorder(service_settings)
    yield recorder
    recorder.close()


@pytest.fixture()
def row_writes(service_settings) -> Iterator:
    """Counts every write (INSERT or UPDATE) of a generation's attempt rows, where its text is
    kept, with its time, through a Postgres trigger."""
    url = service_settings.resolved_database_url
    with session_scope(url) as session:
        session.execute(text("CREATE TABLE generation_writes (id text, at double precision)"))
        session.execute(
            text(
                "CREATE FUNCTION note_generation_write() RETURNS trigger AS $$ BEGIN "
                "INSERT INTO generation_writes VALUES (NEW.generation_id, extract(epoch from clock_timestamp())); "
                "RETURN NEW; END $$ LANGUAGE plpgsql"
            )
        )
        session.execute(
            text(
                "CREATE TRIGGER generation_writes AFTER INSERT OR UPDATE ON generation_samples "
                "FOR EACH ROW EXECUTE FUNCTION note_generation_write()"
            )
        )

    def writes(generation_id: str) -> list[float]:
        with session_scope(url) as session:
            return list(
                session.scalars(
                    text("SELECT at FROM generation_writes WHERE id = :id ORDER BY at"), {"id": generation_id}
                )
            )

    yield writes
    with session_scope(url) as session:
        session.execute(text("DROP TRIGGER generation_writes ON generation_samples"))
        session.execute(text("DROP FUNCTION note_generation_write()"))
        session.execute(text("DROP TABLE generation_writes"))


def stream_completion(server: str, headers: dict, body: dict) -> list[tuple[str | None, str]]:
    with httpx.stream(
        "POST", f"{server}/v1/completions", json=body | {"stream": True}, headers=headers, timeout=300
    ) as r:
        assert r.status_code == 200, r.read()
        return sse_events(r.iter_lines())


def test_published_deltas_arrive_in_order_and_add_up_to_the_final_text(
    server, worker, auth_headers, channels, service_settings
):
    events = stream_completion(server, auth_headers, LONG)

    chunks = [json.loads(data) for _, data in events[:-1]]
    generation_id = chunks[0]["id"]
    streamed = "".join(c["choices"][0]["text"] for c in chunks)
    final = stored_samples(service_settings.resolved_database_url, generation_id)[0].text
    deltas = [e for e in channels.of(generation_id) if e.index is not None]
    assert len(deltas) > 5
    assert [e.offset for e in deltas] == [0, *(e.offset + len(e.delta) for e in deltas[:-1])]  # no gap, no overlap
    assert "".join(e.delta for e in deltas) == final[: len("".join(e.delta for e in deltas))]
    assert streamed == final
    assert [e for e in channels.of(generation_id) if e.status == "succeeded"]


def test_the_worker_writes_the_row_about_once_a_second_while_it_streams(
    server, worker, auth_headers, channels, row_writes, service_settings
):
    events = stream_completion(server, auth_headers, LONG)

    generation_id = json.loads(events[0][1])["id"]
    with session_scope(service_settings.resolved_database_url) as session:
        generate_s = session.get(Generation, generation_id).timings.generate_s
    writes = row_writes(generation_id)
    deltas = [e for e in channels.of(generation_id) if e.index is not None]
    assert generate_s > 3 * FLUSH_S, "decoding too short to tell the write rates apart"
    # the attempt's row made, the finished attempt, the record; and the partial text once per ROW_FLUSH_S
    assert len(writes) <= 4 + generate_s / ROW_FLUSH_S + 1
    assert len(writes) < generate_s / FLUSH_S  # what a write every FLUSH_S would make
    assert len(deltas) > len(writes)


def test_a_follower_that_joins_midway_catches_up_from_the_row_without_gaps_or_repeats(
    server, worker, auth_headers, channels, service_settings
):
    answers: list[list] = []
    body = LONG | {"max_tokens": 600}
    thread = threading.Thread(target=lambda: answers.append(stream_completion(server, auth_headers, body)))
    thread.start()
    started = wait_for(
        lambda: next((gid for gid, e in channels.events if e.index is not None and e.offset > 0), None),
        timeout=120,
        what="a streamed generation under way",
    )
    time.sleep(ROW_FLUSH_S / 2)  # the row now lags the published text

    async def texts() -> list[str]:
        return [s.samples[0].text if s.samples else "" async for s in follow(service_settings, started)]

    joined = time.time()
    seen = asyncio.run(texts())
    thread.join(300)

    with session_scope(service_settings.resolved_database_url) as session:
        row = session.get(Generation, started)
        decoding_after_join = row.finished_at - joined
    final = stored_samples(service_settings.resolved_database_url, started)[0].text
    assert seen[-1] == final
    assert "".join(json.loads(data)["choices"][0]["text"] for _, data in answers[0][:-1]) == final
    assert all(later.startswith(earlier) for earlier, later in zip(seen, seen[1:]))
    if decoding_after_join > 2 * ROW_FLUSH_S:
        # Decoding went on for a while after the follower joined (a loaded machine can finish it
        # first): it followed the deltas, not only the row's once-a-second writes.
        assert len([t for t in seen[:-1] if t]) > 2


def test_a_client_that_disconnects_mid_stream_stops_its_decoding(
    server, worker, auth_headers, channels, service_settings
):
    body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 4000, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server}/v1/completions", json=body, headers=auth_headers, timeout=120) as r:
        first = next(line for line in r.iter_lines() if line.startswith("data: "))
        generation_id = json.loads(first.removeprefix("data: "))["id"]
    # The connection is closed: the row ends with the reason ...
    url = service_settings.resolved_database_url

    def status() -> tuple[str, str | None]:
        with session_scope(url) as session:
            found = session.get(Generation, generation_id)
            return found.status, found.error.code if found.error else None

    assert wait_for(lambda: status()[0] == "failed", timeout=30, what="the abandoned row to end")
    assert status() == ("failed", "client_gone")
    # ... and the worker stops decoding it at its next flush: no more deltas are published.
    time.sleep(ROW_FLUSH_S + 1)
    published = len(channels.of(generation_id))
    time.sleep(2 * ROW_FLUSH_S)
    assert len(channels.of(generation_id)) == published


def test_a_client_that_stops_waiting_for_a_whole_answer_stops_its_decoding(
    server, worker, auth_headers, service_settings
):
    body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 4000, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server}/v1/completions", json=body, headers=auth_headers, timeout=4)
    url = service_settings.resolved_database_url

    def newest() -> tuple[str, str | None]:
        with session_scope(url) as session:
            row = session.scalars(select(Generation).order_by(Generation.created_at.desc())).first()
            return row.status, row.error.code if row.error else None

    assert wait_for(lambda: newest()[0] == "failed", timeout=30, what="the abandoned row to end")
    assert newest() == ("failed", "client_gone")
