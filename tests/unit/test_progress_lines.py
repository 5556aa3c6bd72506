"""The training run's progress lines: one typed model per kind, written by the run and read back
by the service's supervisor and by ``cuset tune`` with one parser."""

from __future__ import annotations

import io
import json

from cuset_core.training.callbacks import ProgressWriter
from cuset_core.training.progress_lines import (
    OBJECTIVE_METRICS,
    CheckpointLine,
    DoneLine,
    EventLine,
    StepLine,
    parse_line,
)


def test_every_kind_written_reads_back_as_the_same_line(tmp_path):
    written = [
        StepLine(step=3, max_steps=10, loss=0.5, ce=0.7, kept_ratio=0.4, tokens_per_s=12.5, trained_tokens=300),
        EventLine(message="loading model", topic="data", level="warning"),
        CheckpointLine(step=3, path=str(tmp_path / "checkpoint-3")),
        DoneLine(output_dir=str(tmp_path), adapter_path=None, steps=10, train_tokens=1000),
    ]
    writer = ProgressWriter(tmp_path / "progress.jsonl", stream=io.StringIO(), enabled=True)
    for line in written:
        writer.write(line)

    read = [parse_line(raw) for raw in (tmp_path / "progress.jsonl").read_text().splitlines()]

    assert read == written


def test_a_loss_that_is_not_finite_is_written_as_null_and_the_line_stays_json(tmp_path):
    stream = io.StringIO()
    ProgressWriter(None, stream=stream, enabled=True).write(StepLine(step=1, max_steps=2, loss=float("nan")))

    assert json.loads(stream.getvalue())["loss"] is None
    assert parse_line(stream.getvalue()).loss is None


def test_the_objectives_metrics_stand_flat_beside_the_step_as_older_runs_wrote_them():
    older = '{"type": "progress", "step": 2, "max_steps": 4, "loss": 1.5, "ce": 1.2, "weight_max": 3.0, "time": 1.0}'

    line = parse_line(older)

    assert isinstance(line, StepLine) and line.ce == 1.2 and line.weight_max == 3.0
    assert set(OBJECTIVE_METRICS) <= set(StepLine.model_fields)
    assert {"ce", "weight_max", "loss", "epoch"} <= set(line.metrics()) and "eta_s" not in line.metrics()


def test_a_torn_or_unknown_line_is_skipped_not_fatal():
    assert parse_line('{"type": "progress", "st') is None
    assert parse_line('{"type": "a kind from a newer run"}') is None
    assert parse_line("[1, 2]") is None
    newer = parse_line('{"type": "event", "message": "hi", "time": 5.0, "a_newer_field": 1}')
    assert newer == EventLine(message="hi", time=5.0)
