"""`cuset eval`: scoring given answers end to end, generating with a model, input errors, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuset_core.cli import app
from cuset_core.evaluation.config import EvalConfig
from cuset_core.evaluation.decoding import Answer
from cuset_core.evaluation.metrics import aggregate, problem_row
from cuset_core.evaluation.problems import load_problems
from cuset_core.evaluation.report import render_markdown
from cuset_core.evaluation.runner import EvalReport
from cuset_core.evaluation.scoring import SampleRecord, repair, row_of, score_problem
from cuset_core.verify.result import Tier, Verdict, VerifyResult

DEMO = Path(__file__).resolve().parents[2] / "cuset_core" / "demo"


def fenced(code: str) -> str:
    return f"Here is the kernel.\n```python\n{code}```\n"


def broken_vector_add() -> str:
    """The demo solution with an undeclared identifier inside its kernel."""
    code = (DEMO / "solutions" / "01_vector_add.py").read_text()
    return fenced(code.replace("    if (i < n) {", "    if (i < n) { undeclared_name = 1;", 1))


@pytest.fixture
def problem_dir(tmp_path) -> Path:
    folder = tmp_path / "problems"
    folder.mkdir()
    for name in ("01_vector_add", "02_relu"):
        (folder / f"{name}.py").write_text((DEMO / "problems" / f"{name}.py").read_text())
    return folder


def write_jsonl(path: Path, *rows: dict) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def run_cli(*args: str):
    return CliRunner().invoke(app, ["eval", *args])


def run_tiny_model(tiny_model_dir: Path, problem_dir: Path, out: Path, *args: str) -> dict:
    """`cuset eval` with the tiny model at the static tier, 4 new tokens at most (``args`` come last,
    so they override); its results.json."""
    outcome = run_cli(
        "--model",
        str(tiny_model_dir),
        "--problems",
        str(problem_dir),
        "--tier",
        "static",
        "--max-new-tokens",
        "4",
        "--out",
        str(out),
        "--quiet",
        "--no-cache",
        *args,
    )
    assert outcome.exit_code == 0, outcome.output
    return json.loads((out / "results.json").read_text())


@pytest.mark.nvcc
def test_scoring_one_right_and_one_wrong_answer_at_the_compile_tier(tmp_path, problem_dir):
    answers = tmp_path / "answers.jsonl"
    write_jsonl(
        answers,
        {"problem_id": "02_relu", "answer": fenced((DEMO / "solutions" / "02_relu.py").read_text())},
        {"id": "01_vector_add", "samples": [broken_vector_add()]},
    )
    out = tmp_path / "out"
    outcome = run_cli(
        "--answers",
        str(answers),
        "--problems",
        str(problem_dir),
        "--tier",
        "compile",
        "--out",
        str(out),
        "--quiet",
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert outcome.exit_code == 0, outcome.output
    results = json.loads((out / "results.json").read_text())
    assert results["aggregate"]["greedy"] is None
    assert results["aggregate"]["sampled"]["metrics"] == {"compile@1": 0.5}
    assert results["aggregate"]["verdicts"] == {"compile_error": 1, "pass": 1}
    rows = {row["id"]: (row["n"], row["compiled"]) for row in results["problems"]}
    assert rows == {"01_vector_add": (1, 0), "02_relu": (1, 1)}
    assert [s["result"]["verdict"] for s in results["samples"]] == ["compile_error", "pass"]
    text = (out / "results.md").read_text()
    assert "| problem | greedy | n | compiled | verdicts (i.i.d.) |\n|---|---|---|---|---|\n" in text
    assert "| 02_relu | - | 1 | 1 | pass 1 |" in text


@pytest.mark.nvcc
def test_a_greedy_answer_is_scored_apart_from_the_samples(tmp_path, problem_dir):
    relu = fenced((DEMO / "solutions" / "02_relu.py").read_text())
    answers = tmp_path / "answers.jsonl"
    write_jsonl(
        answers,
        {"id": "02_relu", "greedy": relu, "samples": [broken_vector_add(), relu]},
        {"problem_id": "01_vector_add", "answer": broken_vector_add(), "greedy": True},
        {"problem_id": "01_vector_add", "answer": broken_vector_add()},
        {"problem_id": "01_vector_add", "answer": broken_vector_add()},
    )
    out = tmp_path / "out"
    outcome = run_cli(
        "--answers",
        str(answers),
        "--problems",
        str(problem_dir),
        "--tier",
        "compile",
        "--k",
        "1,2",
        "--out",
        str(out),
        "--quiet",
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert outcome.exit_code == 0, outcome.output
    aggregate = json.loads((out / "results.json").read_text())["aggregate"]
    assert aggregate["greedy"]["metrics"] == {"compile@1": 0.5}
    # relu: 1 of 2 i.i.d. answers compiles (pass@1 0.5, pass@2 1); vector add: 0 of 2
    assert aggregate["sampled"]["metrics"] == {"compile@1": 0.25, "compile@2": 0.5}
    assert aggregate["samples"] == 6
    assert "greedy: compile@1 0.500" in outcome.output and "pass@k: compile@1 0.250, compile@2 0.500" in outcome.output


def test_generating_with_a_model_scores_every_sample(tmp_path, problem_dir, tiny_model_dir):
    results = run_tiny_model(tiny_model_dir, problem_dir, tmp_path / "out", "--samples", "2")
    assert results["aggregate"]["samples"] == 6  # a greedy sample and 2 i.i.d. ones per problem
    assert results["aggregate"]["k_values"] == [1, 2]
    assert (results["aggregate"]["greedy"]["problems"], results["aggregate"]["sampled"]["samples"]) == (2, 4)
    assert [(s["problem_id"], s["index"], s["greedy"]) for s in results["samples"]] == [
        ("01_vector_add", 0, True),
        ("01_vector_add", 1, False),
        ("01_vector_add", 2, False),
        ("02_relu", 0, True),
        ("02_relu", 1, False),
        ("02_relu", 2, False),
    ]
    assert all(s["completion_tokens"] <= 4 for s in results["samples"])
    assert not (tmp_path / "out" / "checkpoint.jsonl").exists()  # a finished eval's results hold it all


def test_answers_are_generated_with_the_weights_in_the_dtype_asked_for(tmp_path, problem_dir, tiny_model_dir):
    bfloat16 = run_tiny_model(tiny_model_dir, problem_dir, tmp_path / "bf16", "--dtype", "bfloat16")
    default = run_tiny_model(tiny_model_dir, problem_dir, tmp_path / "default")
    assert (bfloat16["config"]["dtype"], default["config"]["dtype"]) == ("bfloat16", "auto")  # recorded
    assert bfloat16["aggregate"]["samples"] == 2 and all(s["completion_tokens"] <= 4 for s in bfloat16["samples"])


def test_greedy_only_by_default_and_no_greedy_draws_only_iid_samples(tmp_path, problem_dir, tiny_model_dir):
    default = run_tiny_model(tiny_model_dir, problem_dir, tmp_path / "a", "--max-new-tokens", "2")
    assert [s["greedy"] for s in default["samples"]] == [True, True]
    assert default["aggregate"]["sampled"] is None and default["aggregate"]["k_values"] == []
    sampled = run_tiny_model(
        tiny_model_dir,
        problem_dir,
        tmp_path / "b",
        "--max-new-tokens",
        "2",
        "--no-greedy",
        "--samples",
        "2",
        "--k",
        "2",
    )
    assert not any(s["greedy"] for s in sampled["samples"]) and len(sampled["samples"]) == 4
    assert sampled["aggregate"]["greedy"] is None
    assert list(sampled["aggregate"]["sampled"]["metrics"]) == []  # the static tier reaches no compile metric
    assert sampled["aggregate"]["k_values"] == [2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--samples", "2", "--k", "1,4"), "error: options: k=4: pass@k needs 1 <= k <= samples (2 i.i.d."),
        (("--k", "1,x"), "error: --k: expected comma-separated integers"),
        (("--no-greedy",), "error: options: nothing to generate"),
    ],
)
def test_impossible_sampling_options_are_refused(problem_dir, args, message):
    outcome = run_cli("--model", "smollm2-135m", "--problems", str(problem_dir), "--out", "o", *args)
    assert outcome.exit_code == 2
    assert outcome.output.startswith(message)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tolerance-profile", "loose"), "error: tolerance_profile: Input should be 'kernelbench' or 'v0'"),
        (("--atol", "-1"), "error: atol: Input should be greater than or equal to 0"),
        (("--arch", "90"), "error: arch: String should match pattern"),
        (("--trials", "0"), "error: trials: Input should be greater than or equal to 1"),
        (("--dtype", "int8"), "error: dtype: Input should be 'auto', 'bfloat16', 'float16' or 'float32'"),
    ],
)
def test_bad_verification_options_name_the_option(problem_dir, args, message):
    outcome = run_cli("--model", "smollm2-135m", "--problems", str(problem_dir), "--out", "o", *args)
    assert outcome.exit_code == 2
    assert outcome.output.startswith(message)


def test_a_malformed_endpoint_model_is_refused_before_anything_runs(tmp_path, problem_dir):
    outcome = run_cli("--model", "openai:localhost:8000#m", "--problems", str(problem_dir), "--out", str(tmp_path))
    assert outcome.exit_code == 2
    assert outcome.output.startswith("error: options: model: 'openai:localhost:8000#m': the URL must be http(s)")


def test_the_verification_knobs_reach_the_verifier_and_the_report(tmp_path, problem_dir):
    answers = tmp_path / "answers.jsonl"
    write_jsonl(answers, {"problem_id": "02_relu", "answer": "no code"})
    knobs = ("--trials", "3", "--input-seed", "7", "--tolerance-profile", "v0", "--rtol", "0.001", "--arch", "sm_80")
    out = tmp_path / "out"
    outcome = run_cli(
        "--answers", str(answers), "--problems", str(problem_dir), "--tier", "static", "--out", str(out), *knobs
    )
    assert outcome.exit_code == 0, outcome.output
    config = EvalConfig.model_validate(json.loads((out / "results.json").read_text())["config"])
    settings = config.verify_settings()
    assert (settings.seeds, settings.input_seed, settings.arch) == (3, 7, "sm_80")
    assert settings.tolerance("float32") == (1e-2, 1e-3)  # v0's atol, the explicit rtol
    assert (
        "Verification: 3 correctness trials (input seeds 7..9), tolerance profile `v0` with atol 0.01, rtol 0.001"
        in (out / "results.md").read_text()
    )


def test_kernelbench_defaults_five_trials_and_its_tolerances():
    settings = EvalConfig(model="m", problems="demo").verify_settings()
    assert (settings.seeds, settings.tolerance("float32"), settings.tolerance("bfloat16")) == (
        5,
        (1e-4, 1e-4),
        (1e-2, 1e-2),
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"problem_id": "02_relu", "answer": "x"}\nnot json\n', "error: answers.jsonl line 2: not valid JSON"),
        (
            '{"problem_id": "02_relu"}\n',
            'error: answers.jsonl line 1: expected {"problem_id", "answer": str, "greedy"?: bool}',
        ),
        ('{"problem_id": "nope", "answer": "x"}\n', "error: answers.jsonl line 1: problem id 'nope' is not in"),
        ("\n", "error: answers.jsonl: no answers"),
        (
            '{"problem_id": "02_relu", "answer": "x", "greedy": true}\n{"id": "02_relu", "samples": [], "greedy": "y"}\n',
            "error: answers.jsonl line 2: a second greedy answer for problem '02_relu'",
        ),
    ],
)
def test_a_bad_answers_file_is_one_clear_line_and_exit_2(tmp_path, problem_dir, content, message):
    answers = tmp_path / "answers.jsonl"
    answers.write_text(content)
    outcome = run_cli("--answers", str(answers), "--problems", str(problem_dir), "--out", str(tmp_path / "o"))
    assert outcome.exit_code == 2
    assert outcome.output.startswith(message)
    assert len(outcome.output.strip().splitlines()) == 1


def test_pass_at_k_over_answers_needs_k_answers_for_every_problem(tmp_path, problem_dir):
    answers = tmp_path / "answers.jsonl"
    write_jsonl(
        answers,
        {"id": "02_relu", "samples": ["a", "b"]},
        {"id": "01_vector_add", "samples": ["c"]},
    )
    outcome = run_cli(
        "--answers", str(answers), "--problems", str(problem_dir), "--k", "2", "--out", str(tmp_path / "o")
    )
    assert (outcome.exit_code, outcome.output.strip()) == (
        2,
        "error: k: pass@2 needs at least 2 i.i.d. answers per problem; problem '01_vector_add' has 1",
    )
    assert not (tmp_path / "o").exists()


def test_model_and_answers_together_are_refused(tmp_path, problem_dir):
    outcome = run_cli("--model", "m", "--answers", "a.jsonl", "--problems", str(problem_dir), "--out", "o")
    assert (outcome.exit_code, outcome.output.strip()) == (
        2,
        "error: options: give exactly one of model (to generate answers) or answers (to score them)",
    )


def test_an_unknown_problem_set_is_refused(tmp_path):
    outcome = run_cli("--answers", "a.jsonl", "--problems", str(tmp_path / "missing"), "--out", "o")
    assert outcome.exit_code == 2
    assert outcome.output.startswith("error: problems: ")


def test_problems_load_from_jsonl_with_line_numbers(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text('{"id": "a", "problem": "code a"}\n{"id": 7, "problem": "code b"}\n')
    assert [(p.id, p.code) for p in load_problems(str(path))] == [("a", "code a"), ("7", "code b")]
    path.write_text('{"id": "a", "problem": "x"}\n{"id": "a", "problem": "y"}\n')
    with pytest.raises(ValueError, match="line 2: duplicate id 'a'"):
        load_problems(str(path))


def test_the_markdown_report_shows_the_greedy_and_pass_at_k_blocks_apart():
    fast = VerifyResult(verdict=Verdict.PASS, tier=Tier.GPU, speedup=1.75)
    broken = VerifyResult(verdict=Verdict.COMPILE_ERROR, tier=Tier.COMPILE)
    scored = {"a": (fast, [fast, broken]), "b": (broken, [broken, broken])}  # problem -> (greedy, i.i.d.)
    rows = [problem_row(pid, sampled, greedy) for pid, (greedy, sampled) in scored.items()]
    report = EvalReport(
        config=EvalConfig(model="m", problems="demo", tier=Tier.GPU, samples=2, temperature=0.7),
        aggregate=aggregate(rows, Tier.GPU, [1, 2]),
        problems=rows,
        samples=[
            SampleRecord(problem_id=pid, index=i, greedy=i == 0, answer="...", result=result)
            for pid, (greedy, sampled) in scored.items()
            for i, result in enumerate([greedy, *sampled])
        ],
        elapsed_s=1.25,
    )
    fast_rows = "".join(f"| {p} | 0.500 |\n" for p in ("0.0", "0.5", "0.8", "1.0", "1.5")) + "| 2.0 | 0.000 |\n"
    assert render_markdown(report) == (
        "# Evaluation results\n\n"
        "model `m` on `demo`: 2 problems, 6 samples, tier `gpu`, a greedy sample + 2 i.i.d. samples per problem "
        "at temperature 0.7 (top-p 0.95), prompt `kernelbench`, 1.2 s. Verification: 5 correctness trials "
        "(input seeds 1000..1004), tolerance profile `kernelbench`, nvcc `sm_90`.\n\n"
        "## Greedy: one greedy sample per problem, drawn apart\n\n"
        "Share of 2 problems whose greedy sample passed.\n\n"
        "| metric | value |\n|---|---|\n"
        "| compile@1 | 0.500 |\n| cpu_correct@1 | 0.500 |\n| correct@1 | 0.500 |\n"
        + "".join(f"| fast_{p} | 0.500 |\n" for p in ("0.0", "0.5", "0.8", "1.0", "1.5"))
        + "| fast_2.0 | 0.000 |\n"
        "\n## pass@k: i.i.d. samples at one temperature (unbiased estimator, Chen et al. 2021)\n\n"
        "4 samples over 2 problems, k = 1, 2; no greedy sample among them.\n\n"
        "| metric | value |\n|---|---|\n"
        "| compile@1 | 0.250 |\n| compile@2 | 0.500 |\n| cpu_correct@1 | 0.250 |\n| cpu_correct@2 | 0.500 |\n"
        "| correct@1 | 0.250 |\n| correct@2 | 0.500 |\n"
        + "".join(f"| fast_{p} (mean over samples) | 0.250 |\n" for p in ("0.0", "0.5", "0.8", "1.0", "1.5"))
        + "| fast_2.0 (mean over samples) | 0.000 |\n\n"
        "## KernelBench: fast_p over one scored sample per problem\n\n"
        "The greedy sample of each of 2 problems (1 correct); a problem is fast_p when its sample is correct and "
        "more than p times faster than the baseline.\n\n"
        "| p | fast_p (eager) |\n|---|---|\n" + fast_rows + "\n"
        "Geometric-mean speedup over eager of the correct samples: 1.75.\n\n"
        "## Verdicts\n\n| verdict | greedy | i.i.d. |\n|---|---|---|\n| compile_error | 1 | 3 |\n| pass | 1 | 1 |\n\n"
        "## Problems\n\n"
        "| problem | greedy | n | compiled | cpu_correct | correct | best speedup | scored speedup | verdicts (i.i.d.) |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        "| a | pass | 2 | 1 | 1 | 1 | 1.75 | 1.75 | compile_error 1, pass 1 |\n"
        "| b | compile_error | 2 | 0 | 0 | 0 | - | - | compile_error 2 |\n"
    )


def test_the_markdown_report_gives_fast_p_against_torch_compile_when_it_was_timed():
    fast = VerifyResult(verdict=Verdict.PASS, tier=Tier.GPU, speedup=2.5, compile_speedup=0.9)
    slow = VerifyResult(verdict=Verdict.PASS, tier=Tier.GPU, speedup=0.7, compile_speedup=0.4)
    rows = [problem_row("a", [fast]), problem_row("b", [slow])]
    report = EvalReport(
        config=EvalConfig(answers=Path("a.jsonl"), problems="demo", tier=Tier.GPU, compile_baseline=True),
        aggregate=aggregate(rows, Tier.GPU, [1]),
        problems=rows,
        samples=[],
        elapsed_s=1.0,
    )
    text = render_markdown(report)
    assert "nvcc `sm_90`, torch.compile baseline timed." in text
    assert "The first i.i.d. sample of each of 2 problems (2 correct)" in text
    assert "| p | fast_p (eager) | fast_p (torch.compile) |\n|---|---|---|\n| 0.0 | 1.000 | 1.000 |\n" in text
    assert "| 0.8 | 0.500 | 0.500 |\n| 1.0 | 0.500 | 0.000 |\n" in text
    assert (
        "speedup over eager of the correct samples: 1.32.\nOver torch.compile: 0.60." in text
    )  # sqrt(2.5*0.7), sqrt(0.36)


@pytest.mark.nvcc
def test_a_sample_its_repair_fixes_passes_within_one_repair_and_the_model_saw_its_error(tmp_path, problem_dir):
    config = EvalConfig(
        model="m", answers=tmp_path / "given.jsonl", problems=str(problem_dir), repair_rounds=2, cache_dir=tmp_path
    )
    problems = {p.id: p for p in load_problems(config.problems)}
    given = {
        "01_vector_add": [Answer(broken_vector_add(), greedy=True), Answer(broken_vector_add())],
        "02_relu": [Answer(fenced((DEMO / "solutions" / "02_relu.py").read_text()))],
    }
    settings = config.verify_settings()
    records = {
        pid: score_problem(problems[pid], answers, settings, tmp_path, True)[1] for pid, answers in given.items()
    }
    conversations = []

    def fixing_model(batch, run, seed):
        """Answers every follow-up turn with the demo solution of vector add."""
        conversations.extend(batch)
        return [[Answer(fenced((DEMO / "solutions" / "01_vector_add.py").read_text()), run.greedy)] for _ in batch]

    repair(fixing_model, config, list(problems.values()), records, settings)

    assert len(conversations) == 2  # the greedy and the i.i.d. sample of vector add, once each
    assert all("compile error" in turns[-1]["content"] and turns[-2]["role"] == "assistant" for turns in conversations)
    attempts = [(r.index, r.greedy, r.round, r.repair_of, r.result.verdict) for r in records["01_vector_add"]]
    assert attempts == [
        (0, True, 0, None, Verdict.COMPILE_ERROR),
        (1, False, 0, None, Verdict.COMPILE_ERROR),
        (2, True, 1, 0, Verdict.PASS),
        (3, False, 1, 1, Verdict.PASS),
    ]
    rows = [row_of(pid, records[pid], config.repair_rounds) for pid in given]
    agg = aggregate(rows, Tier.COMPILE, [1])
    assert (agg.greedy.metrics, agg.repaired.greedy.metrics) == ({"compile@1": 0.0}, {"compile@1": 1.0})
    assert (agg.sampled.metrics, agg.repaired.sampled.metrics) == ({"compile@1": 0.5}, {"compile@1": 1.0})
    assert (agg.repaired.rounds, agg.repaired.repairs) == (2, 2)


def test_given_answers_are_repaired_by_the_model_for_r_rounds_and_counted_apart(tmp_path, problem_dir, tiny_model_dir):
    answers = tmp_path / "answers.jsonl"
    relu = fenced((DEMO / "solutions" / "02_relu.py").read_text())
    write_jsonl(
        answers,
        {"problem_id": "01_vector_add", "answer": "no code"},
        {"problem_id": "02_relu", "answer": relu},
    )
    out = tmp_path / "out"
    results = run_tiny_model(tiny_model_dir, problem_dir, out, "--answers", str(answers), "--repair-rounds", "2")
    chain = [(s["index"], s["round"], s["repair_of"]) for s in results["samples"] if s["problem_id"] == "01_vector_add"]
    assert chain == [(0, 0, None), (1, 1, 0), (2, 2, 1)]  # the tiny model's repairs fail too
    assert [s["round"] for s in results["samples"] if s["problem_id"] == "02_relu"] == [0]  # passed: no repair
    assert results["aggregate"]["samples"] == 2  # the plain figures count the given answers only
    assert (results["aggregate"]["repaired"]["rounds"], results["aggregate"]["repaired"]["repairs"]) == (2, 2)
    assert results["aggregate"]["repaired"]["sampled"]["samples"] == 2
    assert "## Within 2 repairs" in (out / "results.md").read_text()


def test_repairs_need_a_model(tmp_path, problem_dir):
    outcome = run_cli("--answers", "a.jsonl", "--repair-rounds", "1", "--problems", str(problem_dir), "--out", "o")
    assert (outcome.exit_code, outcome.output.strip()) == (
        2,
        "error: options: repair_rounds: repairs need a model to send failing samples back to",
    )


def kernelbench_level(tmp_path: Path) -> Path:
    """A KernelBench level folder: problem files named <number>_<name>.py."""
    folder = tmp_path / "KernelBench" / "level1"
    folder.mkdir(parents=True)
    for number, name in ((1, "01_vector_add"), (2, "02_relu"), (19, "02_relu")):
        (folder / f"{number}_{name[3:]}.py").write_text((DEMO / "problems" / f"{name}.py").read_text())
    return folder


def test_problems_are_selected_by_kernelbench_number_range_or_id(tmp_path):
    from cuset_core.evaluation.inputs import EvalInputError
    from cuset_core.evaluation.problems import select_problems

    problems = load_problems(str(kernelbench_level(tmp_path)))
    assert [p.id for p in select_problems(problems, None)] == ["19_relu", "1_vector_add", "2_relu"]
    assert [p.id for p in select_problems(problems, "1-2")] == ["1_vector_add", "2_relu"]
    assert [p.id for p in select_problems(problems, "19, 1_vector_add")] == ["19_relu", "1_vector_add"]
    with pytest.raises(EvalInputError, match="problem_ids: 2_Relu names no problem"):
        select_problems(problems, "1,2_Relu")
    with pytest.raises(EvalInputError, match="names no problem"):
        select_problems(problems, "40-50")


def test_a_kernelbench_level_folder_is_scored_for_the_chosen_problems_on_several_workers(tmp_path):
    level = kernelbench_level(tmp_path)
    solutions = {name: fenced((DEMO / "solutions" / f"{name}.py").read_text()) for name in ("01_vector_add", "02_relu")}
    answers = tmp_path / "answers.jsonl"
    write_jsonl(
        answers,
        {"problem_id": "1_vector_add", "answer": solutions["01_vector_add"], "greedy": True},
        {"problem_id": "2_relu", "answer": solutions["02_relu"], "greedy": True},
        {"problem_id": "19_relu", "answer": "no code", "greedy": True},
    )
    outcome = run_cli(
        "--answers", str(answers), "--problems", str(level), "--problem-ids", "1-2",
        "--workers", "2", "--tier", "static", "--out", str(tmp_path / "out"), "--quiet",
    )  # fmt: skip
    assert outcome.exit_code == 0, outcome.output
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [row["id"] for row in results["problems"]] == ["1_vector_add", "2_relu"]
    assert results["config"]["workers"] == 2 and results["config"]["problem_ids"] == "1-2"


def test_an_eval_of_an_adapter_defaults_to_the_prompt_style_it_was_tuned_with(tmp_path):
    from cuset_core.evaluation.config import EvalConfig
    from cuset_core.models import recorded_prompt_style, write_base_spec

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    write_base_spec(adapter, "smollm2-135m", "compact")
    assert recorded_prompt_style(adapter) == "compact"
    assert recorded_prompt_style("cuset-ew-135m") == "compact"  # the shipped adapter records it too
    assert EvalConfig(model=str(adapter), problems="demo").prompt_style == "compact"
    assert EvalConfig(model="smollm2-135m", problems="demo").prompt_style == "kernelbench"  # a base model
    asked = EvalConfig(model=str(adapter), problems="demo", prompt_style="kernelbench")
    assert asked.prompt_style == "kernelbench"
    write_base_spec(adapter, "smollm2-135m")  # an adapter from before the record
    assert EvalConfig(model=str(adapter), problems="demo").prompt_style == "kernelbench"
