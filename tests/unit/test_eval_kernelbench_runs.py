"""Scoring generations made with KernelBench's scripts: a ``runs/<run_name>`` folder as answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cuset_core.cli import app
from cuset_core.evaluation.inputs import EvalInputError, ProblemAnswers
from cuset_core.evaluation.kernelbench_runs import kernelbench_number, load_kernelbench_run

DEMO = Path(__file__).resolve().parents[2] / "cuset_core" / "demo"
IDS = ["01_vector_add", "02_relu", "03_scale"]


def run_folder(tmp_path: Path, kernels: dict[tuple[int, int, int], str], temperature: float | None = 0.7) -> Path:
    """A KernelBench run folder: ``{(level, problem, sample): code}`` as kernel files, and the
    generation config KernelBench writes (its ``subset`` is a Python tuple in the YAML)."""
    folder = tmp_path / "runs" / "my_run"
    folder.mkdir(parents=True)
    for (level, problem, sample), code in kernels.items():
        (folder / f"level_{level}_problem_{problem}_sample_{sample}_kernel.py").write_text(code)
    (folder / "level_1_problem_1_sample_0_prompt.txt").write_text("a prompt, not a kernel")
    if temperature is not None:
        config = {"level": 1, "temperature": temperature, "subset": (None, None), "num_samples": 2}
        (folder / "generation_config.yaml").write_text(yaml.dump(config))
    return folder


def test_problem_ids_map_to_kernelbench_ids_by_their_leading_number():
    assert [kernelbench_number(i) for i in ("19_ReLU", "019_relu", "7", "relu", "3d_conv")] == [19, 19, 7, None, None]


def test_sampled_runs_give_i_i_d_answers_in_sample_order_and_empty_ones_for_what_is_missing(tmp_path):
    folder = run_folder(tmp_path, {(1, 1, 0): "a0", (1, 1, 1): "a1", (1, 2, 1): "b1"})
    answers = load_kernelbench_run(folder, IDS)
    assert answers == {
        "01_vector_add": ProblemAnswers(greedy=None, sampled=["a0", "a1"]),
        "02_relu": ProblemAnswers(greedy=None, sampled=["", "b1"]),  # sample 0 failed to generate
        "03_scale": ProblemAnswers(greedy=None, sampled=["", ""]),  # nothing generated: counted as failures
    }


def test_a_temperature_0_run_gives_each_problem_its_greedy_answer(tmp_path):
    folder = run_folder(tmp_path, {(2, 1, 0): "a0", (2, 3, 0): "c0"}, temperature=0.0)
    answers = load_kernelbench_run(folder, IDS)
    assert answers["01_vector_add"] == ProblemAnswers(greedy="a0", sampled=[])
    assert answers["02_relu"] == ProblemAnswers(greedy="", sampled=[])


@pytest.mark.parametrize(
    ("kernels", "temperature", "message"),
    [
        ({(1, 9, 0): "x"}, 0.7, "level_1_problem_9_sample_0_kernel.py: no problem of the set has KernelBench id 9"),
        ({(1, 1, 0): "x", (2, 2, 0): "y"}, 0.7, "mixes levels [1, 2]"),
        ({(1, 1, 0): "x", (1, 1, 1): "y"}, 0.0, "temperature 0 but the run has 2 samples per problem"),
        ({}, 0.7, "holds no level_<L>_problem_<P>_sample_<S>_kernel.py files"),
    ],
)
def test_unusable_run_folders_say_why(tmp_path, kernels, temperature, message):
    with pytest.raises(EvalInputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_kernelbench_run(run_folder(tmp_path, kernels, temperature), IDS)


def test_two_problems_with_one_kernelbench_id_are_refused(tmp_path):
    with pytest.raises(EvalInputError, match="'1_a' and '01_b' both have KernelBench id 1"):
        load_kernelbench_run(run_folder(tmp_path, {(1, 1, 0): "x"}), ["1_a", "01_b"])


def test_cuset_eval_scores_a_kernelbench_run_folder(tmp_path):
    problems = tmp_path / "problems"
    problems.mkdir()
    for name in ("01_vector_add", "02_relu"):
        (problems / f"{name}.py").write_text((DEMO / "problems" / f"{name}.py").read_text())
    solution = (DEMO / "solutions" / "02_relu.py").read_text()
    folder = run_folder(tmp_path, {(1, 2, 0): solution, (1, 2, 1): "no code at all", (1, 1, 1): solution})
    out = tmp_path / "out"
    outcome = CliRunner().invoke(
        app, ["eval", "--answers", str(folder), "--problems", str(problems), "--tier", "static", "--out", str(out)]
    )
    assert outcome.exit_code == 0, outcome.output
    results = json.loads((out / "results.json").read_text())
    verdicts = {(s["problem_id"], s["index"]): s["result"]["verdict"] for s in results["samples"]}
    assert verdicts == {
        ("01_vector_add", 0): "no_code",  # never generated
        ("01_vector_add", 1): "pass",  # the static tier does not run code: any well-formed kernel passes it
        ("02_relu", 0): "pass",
        ("02_relu", 1): "no_code",
    }
    assert results["aggregate"]["sampled"]["k_values"] == [1, 2]
    assert results["config"]["answers"] == str(folder)


def test_an_eval_of_a_kernelbench_level_also_writes_kernelbench_s_runs_layout(tmp_path):
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    for name in ("01_vector_add", "02_relu"):
        (level / f"{name}.py").write_text((DEMO / "problems" / f"{name}.py").read_text())
    solution = (DEMO / "solutions" / "02_relu.py").read_text()
    answers = run_folder(tmp_path, {(1, 2, 0): "```python\n" + solution + "```", (1, 2, 1): "no code at all"})
    out = tmp_path / "out"
    outcome = CliRunner().invoke(
        app, ["eval", "--answers", str(answers), "--problems", str(level), "--tier", "static", "--out", str(out)]
    )
    assert outcome.exit_code == 0, outcome.output
    run = out / "kernelbench_run"
    assert "KernelBench's runs layout" in outcome.output
    # The code taken out of the answer's fence, as KernelBench's generate_samples.py writes it.
    assert (run / "level_1_problem_2_sample_0_kernel.py").read_text() == solution
    results = json.loads((run / "eval_results.json").read_text())
    assert list(results) == ["1", "2"]
    relu = {entry["sample_id"]: entry for entry in results["2"]}
    assert relu[0]["compiled"] is False  # a static-tier eval never reaches the compiler
    assert relu[0]["correctness"] is True and relu[0]["metadata"]["verdict"] == "pass"
    assert relu[1]["correctness"] is False and relu[1]["metadata"]["verdict"] == "no_code"
    assert relu[0]["runtime"] == -1.0


def test_an_eval_of_another_problem_set_writes_no_kernelbench_run(tmp_path):
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "02_relu.py").write_text((DEMO / "problems" / "02_relu.py").read_text())
    answers = run_folder(tmp_path, {(1, 2, 0): (DEMO / "solutions" / "02_relu.py").read_text()})
    out = tmp_path / "out"
    args = ["eval", "--answers", str(answers), "--problems", str(problems), "--tier", "static", "--out", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    assert not (out / "kernelbench_run").exists()
