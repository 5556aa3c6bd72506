"""`cuset serve`'s worker layout: the cpu queue has a worker process of its own, so a validation
never waits behind a generation or a training run, and no one request holds every process."""

from __future__ import annotations

import pytest

from api.embedded import embedded_workers, worker_command
from service.dispatch import QUEUES, ROUTES


def test_the_cpu_queue_has_a_worker_of_its_own_that_nothing_else_uses():
    workers = embedded_workers(concurrency=2, cpu_concurrency=1)

    cpu = [w for w in workers if "cpu" in w.queues]
    assert len(cpu) == 1 and cpu[0].queues == ("cpu",) and cpu[0].concurrency == 1
    others = [w for w in workers if w is not cpu[0]]
    assert [w.queues for w in others] == [("train", "infer")] and others[0].concurrency == 2
    assert sorted(q for w in workers for q in w.queues) == sorted(QUEUES)  # every queue is served


def test_the_reaper_is_scheduled_once_on_the_cpu_worker_and_runs_there():
    workers = embedded_workers()

    assert [w.queues for w in workers if w.beat] == [("cpu",)]
    assert ROUTES["cuset.reap"] == "cpu"  # the reaper never waits behind decoding either
    assert len({w.hostname for w in workers}) == len(workers)  # node names key /readyz entries
    assert len({w.log_name for w in workers}) == len(workers)


def test_each_worker_command_serves_exactly_its_queues(tmp_path):
    for spec in embedded_workers(concurrency=3, cpu_concurrency=2):
        command = worker_command(spec.queues, spec.concurrency, beat=spec.beat, schedule_file=tmp_path / "beat")
        assert command[command.index("-Q") + 1] == ",".join(spec.queues)
        assert command[command.index("-c") + 1] == str(spec.concurrency)
        assert ("-B" in command) == spec.beat


def test_a_worker_without_processes_is_refused():
    with pytest.raises(ValueError):
        embedded_workers(concurrency=2, cpu_concurrency=0)
