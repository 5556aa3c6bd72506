"""A stopped eval resumes from its checkpoint: nothing drawn or verified is done again, and what is
drawn afterwards is what an unstopped run would have drawn."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from cuset_core.evaluation.checkpoint import CHECKPOINT_FILE
from cuset_core.evaluation.config import EvalConfig
from cuset_core.evaluation.inputs import EvalInputError
from cuset_core.evaluation.runner import run_eval
from cuset_core.verify.result import Tier, Verdict

DEMO = Path(__file__).resolve().parents[2] / "cuset_core" / "demo"


@pytest.fixture
def problem_dir(tmp_path) -> Path:
    folder = tmp_path / "problems"
    folder.mkdir()
    for name in ("01_vector_add", "02_relu"):
        shutil.copyfile(DEMO / "problems" / f"{name}.py", folder / f"{name}.py")
    return folder


def tiny_eval(model: Path, problems: Path, **changes) -> EvalConfig:
    """A greedy answer and two samples per problem from ``model``, one problem per batch, static tier."""
    fields = dict(
        model=str(model),
        problems=str(problems),
        samples=2,
        tier=Tier.STATIC,
        max_new_tokens=4,
        batch_size=1,
        cache=False,
        prompt_style="compact",
    )
    return EvalConfig(**(fields | changes))


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def stopped_after_the_first_problem(checkpoint: Path) -> None:
    """Leave what a run stopped during the second problem's verification would have left: the run
    line, both problems drawn, the first verified (its answers marked so a redraw would show), and
    half a line."""
    kept = []
    for line in lines(checkpoint):
        if line.get("problem_id") == "01_vector_add":
            for item in line.get("answers", []) + line.get("records", []):
                item["answer"] = "FROM THE CHECKPOINT"
            for record in line.get("records", []):
                record["result"]["verdict"] = "compile_error"
        if line["kind"] != "verified" or line["problem_id"] == "01_vector_add":
            kept.append(json.dumps(line))
    checkpoint.write_text("\n".join(kept) + '\n{"kind": "verified", "problem_id": "02_re')


def test_a_resumed_eval_keeps_what_was_done_and_draws_the_rest_as_an_unstopped_run_would(
    tmp_path, problem_dir, tiny_model_dir
):
    config = tiny_eval(tiny_model_dir, problem_dir)
    checkpoint = tmp_path / CHECKPOINT_FILE
    whole = run_eval(config, progress=False, checkpoint=checkpoint)
    assert [line["kind"] for line in lines(checkpoint)] == ["run", "drawn", "drawn", "verified", "verified"]

    stopped_after_the_first_problem(checkpoint)
    resumed = run_eval(config, progress=False, checkpoint=checkpoint)

    first = [s for s in resumed.samples if s.problem_id == "01_vector_add"]
    assert [(s.answer, s.result.verdict) for s in first] == [("FROM THE CHECKPOINT", Verdict.COMPILE_ERROR)] * 3
    second = [s.answer for s in resumed.samples if s.problem_id == "02_relu"]
    assert second == [s.answer for s in whole.samples if s.problem_id == "02_relu"]
    # The half line was dropped, and the second problem's verdicts were appended in its place.
    assert [line["kind"] for line in lines(checkpoint)] == ["run", "drawn", "drawn", "verified", "verified"]


def test_an_eval_with_every_answer_drawn_does_not_load_the_model_again(tmp_path, problem_dir, tiny_model_dir):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    checkpoint = tmp_path / CHECKPOINT_FILE
    first = run_eval(tiny_eval(model, problem_dir), progress=False, checkpoint=checkpoint)
    shutil.rmtree(model)
    again = run_eval(tiny_eval(model, problem_dir), progress=False, checkpoint=checkpoint)
    assert [s.answer for s in again.samples] == [s.answer for s in first.samples]


def test_a_checkpoint_of_another_run_is_refused_naming_what_differs(tmp_path, problem_dir, tiny_model_dir):
    checkpoint = tmp_path / CHECKPOINT_FILE
    run_eval(tiny_eval(tiny_model_dir, problem_dir), progress=False, checkpoint=checkpoint)
    before = checkpoint.read_text()
    other = tiny_eval(tiny_model_dir, problem_dir, temperature=0.5, seed=3, workers=2)
    with pytest.raises(EvalInputError, match=r"another run \(seed, temperature differ\)"):
        run_eval(other, progress=False, checkpoint=checkpoint)
    assert checkpoint.read_text() == before


def test_a_damaged_line_before_the_last_is_an_error_with_its_line_number(tmp_path, problem_dir, tiny_model_dir):
    checkpoint = tmp_path / CHECKPOINT_FILE
    run_eval(tiny_eval(tiny_model_dir, problem_dir), progress=False, checkpoint=checkpoint)
    text = checkpoint.read_text().splitlines()
    text[2] = text[2][:20]
    checkpoint.write_text("\n".join(text) + "\n")
    with pytest.raises(EvalInputError, match=rf"checkpoint: {checkpoint}, line 3: not a checkpoint line"):
        run_eval(tiny_eval(tiny_model_dir, problem_dir), progress=False, checkpoint=checkpoint)


def test_a_resumed_eval_counts_the_time_the_stopped_run_spent(tmp_path, problem_dir, tiny_model_dir):
    config = tiny_eval(tiny_model_dir, problem_dir)
    checkpoint = tmp_path / CHECKPOINT_FILE
    run_eval(config, progress=False, checkpoint=checkpoint)
    assert all(line["seconds"] >= 0 for line in lines(checkpoint)[1:])

    stopped_after_the_first_problem(checkpoint)
    kept = checkpoint.read_text().splitlines()
    # The stopped run drew for an hour and verified for ten minutes; a line written before lines
    # carried their seconds counts none.
    pieces = [json.loads(line) for line in kept[1:-1]]
    for line, seconds in zip(pieces, (3600.0, None, 600.0), strict=True):
        line.pop("seconds")
        if seconds is not None:
            line["seconds"] = seconds
    checkpoint.write_text("\n".join([kept[0], *map(json.dumps, pieces)]) + "\n")

    started = time.perf_counter()
    resumed = run_eval(config, progress=False, checkpoint=checkpoint)
    own = time.perf_counter() - started
    assert 4200.0 <= resumed.elapsed_s <= 4200.0 + own
