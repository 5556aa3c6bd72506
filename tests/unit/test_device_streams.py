"""The device process's stream order (``cpu/device/streams.py``): work on other streams waits until
something synchronises it, and runs before any work that must come after it."""

from __future__ import annotations

from collections.abc import Callable

from cuset_core.verify.cpu.device.streams import DEFAULT_STREAM, NOT_READY, StreamOrder

NON_BLOCKING, BLOCKING, OTHER = 11, 12, 13


def order_with_log() -> tuple[StreamOrder, list[str], Callable[..., None]]:
    order, log = StreamOrder(), []

    def submit(stream: int, name: str, nonblocking: bool = True) -> None:
        order.submit(stream, nonblocking, lambda: log.append(name))

    return order, log, submit


def test_the_default_stream_runs_at_once_and_a_non_blocking_stream_waits():
    order, log, submit = order_with_log()
    submit(NON_BLOCKING, "writer")
    submit(DEFAULT_STREAM, "reader")
    assert log == ["reader"]
    order.synchronize(NON_BLOCKING)
    assert log == ["reader", "writer"]


def test_the_default_stream_waits_for_blocking_streams_only():
    order, log, submit = order_with_log()
    submit(NON_BLOCKING, "non-blocking")
    submit(BLOCKING, "blocking", nonblocking=False)
    submit(DEFAULT_STREAM, "default")
    assert log == ["blocking", "default"]
    order.synchronize(DEFAULT_STREAM)
    assert log == ["blocking", "default"]
    order.synchronize_device()
    assert log == ["blocking", "default", "non-blocking"]


def test_streams_nothing_orders_run_the_last_to_submit_first():
    order, log, submit = order_with_log()
    submit(NON_BLOCKING, "writer")
    submit(OTHER, "reader")
    order.synchronize_device()
    assert log == ["reader", "writer"]
    assert order.idle()


def test_an_event_orders_only_the_work_before_its_record():
    order, log, submit = order_with_log()
    submit(NON_BLOCKING, "first")
    order.record(event=1, stream=NON_BLOCKING)
    submit(NON_BLOCKING, "second")
    order.wait(1)
    assert log == ["first"]
    order.wait(2)  # never recorded: complete
    assert log == ["first"]


def test_a_query_answers_not_ready_once_and_the_work_is_done_by_the_next():
    order, log, submit = order_with_log()
    submit(NON_BLOCKING, "work")
    order.record(event=1, stream=NON_BLOCKING)
    assert order.query(NON_BLOCKING) == NOT_READY
    assert order.query_event(1) == NOT_READY
    assert log == []
    assert order.query(NON_BLOCKING) == 0
    assert log == ["work"]
    assert order.query_event(1) == 0


def test_work_that_cannot_wait_runs_its_streams_queue_first():
    order, log, submit = order_with_log()
    submit(NON_BLOCKING, "kernel")
    submit(OTHER, "other")
    order.before(NON_BLOCKING)
    assert log == ["kernel"]
