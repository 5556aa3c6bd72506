"""Every message the API and the workers send is one the receiving task accepts: each sender's
message, read back from the embedded broker, binds to the registered task's signature, names only
rows (ids and indexes), and goes to the queue its task is routed to."""

from __future__ import annotations

import inspect

import pytest

from service import dispatch
from service.dispatch import ROUTES, TaskName
from tests.sqlite_service import enqueued

# One call of every sender, as its callers make it.
CALLS = [
    (dispatch.send_validate_job_files, ("ftjob-1",), {}),
    (dispatch.send_tune, ("ftjob-1",), {}),
    (dispatch.send_generate, ("gen-1",), {}),
    (dispatch.send_generate_repair, ("gen-1", 3), {}),
    (dispatch.send_verify_sample, ("gen-1", 0), {"gpu": False}),
    (dispatch.send_verify_sample, ("gen-1", 0), {"gpu": True}),
    (dispatch.send_confidence, ("gen-1",), {}),
    (dispatch.send_eval, ("eval-1",), {}),
    (dispatch.send_eval_verify, ("eval-1", ["p1", "p2"]), {"gpu": False}),
    (dispatch.send_eval_verify, ("eval-1", ["p1"]), {"gpu": True}),
    (dispatch.send_eval_repair, ("eval-1", "p1"), {}),
    (dispatch.send_reap, (), {}),
]


@pytest.fixture(scope="module")
def registered():
    from worker.app import app

    app.loader.import_default_modules()
    return app.tasks


def test_every_task_has_a_sender_and_every_message_fits_its_task(sqlite_settings, registered):
    for sender, args, kwargs in CALLS:
        sender(sqlite_settings, *args, **kwargs)
    sent = enqueued(sqlite_settings)

    assert {name for name, _ in sent} == set(TaskName)
    for name, payload in sent:
        inspect.signature(registered[name].run).bind(*payload)  # raises TypeError when it does not fit
        assert all(isinstance(value, str | int) for value in payload), (name, payload)


def test_a_batch_of_eval_problems_is_one_message_per_problem_naming_only_the_eval_and_the_problem(sqlite_settings):
    dispatch.send_eval_verify(sqlite_settings, "eval-1", ["p1", "p2", "p3"], gpu=False)

    assert enqueued(sqlite_settings) == [("cuset.eval_verify", ["eval-1", p]) for p in ("p1", "p2", "p3")]


def test_gpu_verification_goes_to_the_queue_of_the_workers_that_hold_the_gpus():
    assert ROUTES[TaskName.VERIFY_GPU] == ROUTES[TaskName.EVAL_VERIFY_GPU] == dispatch.INFER_QUEUE
    assert ROUTES[TaskName.VERIFY_SAMPLE] == ROUTES[TaskName.EVAL_VERIFY] == dispatch.CPU_QUEUE
    assert set(ROUTES) == set(TaskName)
