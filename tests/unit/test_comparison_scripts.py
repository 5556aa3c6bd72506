"""The issue-6 experiment scripts: runs differ only in their objective, and the sweep report
reads what the sweep writes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def comparison():
    return load_script("run_comparison")


@pytest.fixture(scope="module")
def report():
    pytest.importorskip("matplotlib")
    return load_script("results_report")


def test_every_run_of_a_size_trains_the_same_way_except_the_objective(comparison):
    size = comparison.SIZES["small"]
    configs = [comparison.job_config(size, run, "smollm2-135m") for run in comparison.schedule(size)]
    same_seed = [c for c in configs if c["seed"] == 0]

    assert {c["method"]["type"] for c in same_seed} == set(comparison.METHODS)
    for config in same_seed:
        assert {k: v for k, v in config.items() if k != "method"} == {
            k: v for k, v in same_seed[0].items() if k != "method"
        }


def test_the_schedule_puts_sft_and_cuset_first_and_second_seeds_last(comparison):
    names = [run.name for run in comparison.schedule(comparison.SIZES["small"])]

    assert names[:2] == ["sft-s0", "cuset-s0"]
    assert names[7:9] == ["sft-s1", "cuset-s1"]
    assert len(names) == len(set(names)) == 14


def test_a_sweep_variant_changes_only_its_knobs(comparison):
    size = comparison.SIZES["small"]
    default = comparison.job_config(size, comparison.Run("cuset", 1), "smollm2-135m")
    variant_run = comparison.Run("cuset", 1, {"region_threshold": 0.5, "reweight_lambda": 3.0}, "thr0.5-lam3")
    variant = comparison.job_config(size, variant_run, "smollm2-135m")

    assert variant_run.name == "thr0.5-lam3-s1"
    assert variant["method"] == {"type": "cuset", "region_threshold": 0.5, "reweight_lambda": 3.0}
    assert {k: v for k, v in variant.items() if k != "method"} == {k: v for k, v in default.items() if k != "method"}


def test_every_sweep_variant_is_a_valid_method_config(comparison):
    from cuset_core.objectives import MethodConfig

    for knobs in comparison.SWEEP.values():
        MethodConfig(type="cuset", **knobs)


def judge_report(sensitive_p: float) -> dict:
    group = {"tokens": 10, "mean_p": sensitive_p, "share_high": 0.2, "share_low": 0.4}
    return {
        "records": 3,
        "thresholds": {"high": 0.9, "low": 0.5},
        "tokens": {"supervised": 40, "sensitive": 10, "sensitive_share": 0.25},
        "groups": {"sensitive": group, "non_sensitive": {**group, "mean_p": 0.7}, "indexing": group},
        "regions": {"low_confidence_share": 0.3},
    }


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_the_sweep_table_lists_base_then_the_baselines_then_the_variants(report, tmp_path):
    for name, p in (("mask0.6-s1", 0.61), ("cuset-s1", 0.60), ("base", 0.50), ("sft-s1", 0.59)):
        write_json(tmp_path / "sweep" / "judge" / name / "report.json", judge_report(p))
    write_json(tmp_path / "sweep" / "mask0.6-s1" / "job_base.json", {"method": {"type": "cuset", "mask_ratio": 0.6}})
    progress = [
        {"type": "progress", "step": s, "ce": 1.0, "kept_ratio": 0.5, "low_conf_region_share": 0.1, "weight_max": 1.2}
        for s in (1, 2)
    ]
    (tmp_path / "sweep" / "mask0.6-s1" / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in progress))

    lines = report.sweep_section(tmp_path)
    table = [line for line in lines if line.startswith("| ") and not line.startswith("| model")][:4]

    assert [row.split(" | ")[0] for row in table] == ["| base", "| sft-s1", "| cuset-s1", "| mask0.6-s1"]
    assert "cuset: mask_ratio=0.6 | 0.6100" in table[3]
    assert table[3].endswith("| 1.0000 | 0.500 | 0.100 | 1.200 |")


def test_the_sweep_section_says_when_the_sweep_has_not_run(report, tmp_path):
    assert "has not run yet" in report.sweep_section(tmp_path)[0]


def test_the_metrics_table_reads_evals_from_before_and_after_the_greedy_split(report):
    legacy = {"metrics": {"compile@1": 0.5, "compile@2": 0.75}, "verdicts": {"pass": 1}, "samples": 2}
    split = {
        "greedy": {"metrics": {"compile@1": 1.0}},
        "sampled": {"metrics": {"compile@1": 0.25, "compile@2": 0.5}},
        "verdicts": {"pass": 2},
        "samples": 3,
    }
    assert report.metrics_of(legacy) == {"compile@1": 0.5, "compile@2": 0.75}
    # pass@k keeps the plain names; the greedy sample's metrics are named apart
    assert report.metrics_of(split) == {"greedy compile@1": 1.0, "compile@1": 0.25, "compile@2": 0.5}
    runs = {
        "sft-s0": {"method": "sft", "seed": 0, "eval": {"aggregate": split}},
        "sft-s1": {"method": "sft", "seed": 1, "eval": {"aggregate": legacy}},
    }
    row = next(line for line in report.metrics_table(runs) if line.startswith("| sft |"))
    assert row.startswith("| sft | 0,1 | 0.375 ± 0.125 (n=2) | 0.625 ± 0.125 (n=2) |")


def test_an_experiment_eval_draws_the_greedy_sample_apart_and_k_minus_1_iid_ones(comparison, monkeypatch):
    commands = []
    monkeypatch.setattr(comparison, "call", lambda command, **_: commands.append(command) or 1)
    size = comparison.SIZES["small"]
    out = comparison.ROOT / "runs" / "never-written"
    assert not comparison.evaluate(size, "smollm2-135m", out, comparison.ROOT / "cuset_core" / "demo")
    command = commands[0]
    assert command[command.index("--samples") + 1] == str(size.samples - 1)
    assert "--no-greedy" not in command


def test_the_gate_reads_the_greedy_block_not_pass_at_k(tmp_path):
    elementwise = load_script("run_elementwise")
    results = tmp_path / "results.json"
    results.write_text(
        json.dumps(
            {"aggregate": {"greedy": {"metrics": {"compile@1": 0.5}}, "sampled": {"metrics": {"compile@1": 0.125}}}}
        )
    )
    assert elementwise.metric(results, "compile@1") == 0.5


def greedy_results(folder: Path, compile_rate: float, correct_rate: float) -> None:
    folder.mkdir(parents=True)
    metrics = {"compile@1": compile_rate, "cpu_correct@1": correct_rate}
    (folder / "results.json").write_text(json.dumps({"aggregate": {"greedy": {"metrics": metrics}}}))


def test_the_gate_passes_at_each_step_whose_both_sets_meet_the_rule_and_the_comparison_trains_the_first(
    tmp_path, monkeypatch
):
    elementwise = load_script("run_elementwise")
    monkeypatch.setattr(elementwise, "REGIMES", {**elementwise.REGIMES})
    qwen = "qwen2.5-coder-0.5b"
    size, _, eval_steps = elementwise.REGIMES[qwen]
    elementwise.REGIMES[qwen] = (size, tmp_path, eval_steps)
    elementwise.use_regime(qwen)
    run_dir = tmp_path / "runs" / "sft-s0"
    first, second, third = eval_steps
    greedy_results(run_dir / f"step-{first}" / "eval_unseen", 0.1, 0.0)  # below both bounds
    greedy_results(run_dir / f"step-{first}" / "eval_seen", 0.4, 0.0)
    greedy_results(run_dir / f"step-{second}" / "eval_unseen", 0.5, 0.1)  # unseen compile@1 passes
    greedy_results(run_dir / f"step-{second}" / "eval_seen", 0.2, 0.0)
    greedy_results(run_dir / f"step-{third}" / "eval_unseen", 0.6, 0.1)  # the seen set was not evaluated

    assert elementwise.gate_steps(run_dir)["passed_at"] == [second]
    assert elementwise.COMPARE_STEPS == 0  # no gate.json yet: compare refuses to start

    elementwise.write_gate({"train": {"records": 104}}, run_dir)
    gate = json.loads((tmp_path / "gate.json").read_text())
    assert gate["decision"] == "pass" and sorted(gate["steps"]) == [str(first), str(second)]

    elementwise.use_regime(qwen)
    assert elementwise.COMPARE_STEPS == second and elementwise.COMPARE.max_steps == second
    assert elementwise.COMPARE_DIR == tmp_path / "comparison" and elementwise.DOC_BLOCK == "elementwise-qwen05b"
    assert [run.name for run in elementwise.COMPARE_RUNS] == ["sft-s0", "cuset-s0", "sft-s1", "cuset-s1"]
    assert elementwise.COMPARE.model == qwen and elementwise.COMPARE.samples == 5


def test_the_elementwise_split_holds_out_operations_not_rows():
    elementwise = load_script("run_elementwise")
    trained, held = elementwise.split_ops()
    assert not set(trained) & set(held) and len(held) == round(len(set(elementwise.KERNELBENCH_OPS.values())) / 3)
    assert held == sorted(held) and (trained, held) == elementwise.split_ops()  # seeded: the same every time


KERNEL_ANSWER = '''```python
import torch
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // one thread per element
    if (i < n) y[i] = x[i];
}
torch::Tensor run(torch::Tensor x) { auto y = torch::empty_like(x); return y; }
"""

ext = load_inline(name="ext", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=source,
                  functions=["run"], verbose=True)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.run(x)
```'''
PROBLEM = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def test_the_proxies_read_every_held_out_answer_compacted_and_nothing_trained_on():
    from cuset_core.data.records import Message, Record
    from cuset_core.demo import DemoProblem
    from cuset_core.generation.prompts import compact_prompt

    elementwise = load_script("run_elementwise")
    trained, held = elementwise.split_ops()
    number = {op: problem for problem, op in elementwise.KERNELBENCH_OPS.items()}

    def kernelbench(op: str) -> Record:
        messages = [
            Message(role="user", content=compact_prompt(PROBLEM)),
            Message(role="assistant", content=KERNEL_ANSWER),
        ]
        return Record(messages=messages, line=1, group=f"1/{number[op]}", problem=PROBLEM, meta={"problem": number[op]})

    def demo(pid: str) -> DemoProblem:
        return DemoProblem(pid, pid[3:], "elementwise", PROBLEM, KERNEL_ANSWER.removeprefix("```python\n")[:-3])

    seen_demo = next(pid for pid, op in elementwise.DEMO_OPS.items() if op in trained)
    unseen_demo = next(pid for pid, op in elementwise.DEMO_OPS.items() if op not in trained)
    records = elementwise.heldout_answers(
        [kernelbench(trained[0]), kernelbench(held[0]), kernelbench(held[1])],
        held,
        [demo(seen_demo), demo(unseen_demo), demo("12_sum_dim")],  # the last is not elementwise
    )

    assert [r.group for r in records] == [f"1/{number[held[0]]}", f"1/{number[held[1]]}", seen_demo, unseen_demo]
    for record in records:
        assert record.prompt_messages[-1].content == compact_prompt(PROBLEM)
        assert "one thread per element" not in record.answer and "verbose" not in record.answer
        assert "__global__ void k" in record.answer


def confidence_summary(nll: float) -> dict:
    overall = {"regions": 7, "tokens": 90, "nll": nll, "top1_accuracy": 0.5, "region_exact_match": 0.25, "mean_p": 0.6}
    return {"judges": {"groups": {"all": overall, "indexing": {**overall, "nll": 9.0}}}}


def eval_results(compile_rate: float) -> dict:
    """A real results file of one problem, its aggregate figures replaced by the test's own."""
    from eval_support import PASS, results_file

    results = results_file({"p1": (PASS, [PASS] * 4)}, (1, 4))
    results["aggregate"].update(
        greedy={"metrics": {"compile@1": compile_rate, "cpu_correct@1": 0.0}},
        sampled={"metrics": {"cpu_correct@1": 0.1, "cpu_correct@4": 0.2}},
        verdicts={"pass": 1},
    )
    return results


def test_the_comparison_report_lists_the_base_model_and_each_runs_proxies(tmp_path, monkeypatch):
    elementwise = load_script("run_elementwise")
    monkeypatch.setattr(elementwise, "COMPARE_DIR", tmp_path)
    monkeypatch.setattr(elementwise, "RESULTS_DOC", tmp_path / "results.md")
    for run in ("sft-s0", "dft-s0"):  # dft-s0 finished before the confidence stage existed
        for name in elementwise.EVAL_SETS:
            write_json(tmp_path / run / f"eval_{name}" / "results.json", eval_results(0.5))
    write_json(tmp_path / "sft-s0" / "confidence" / "report.json", confidence_summary(1.25))
    write_json(tmp_path / "base" / "confidence" / "report.json", confidence_summary(2.5))

    elementwise.report()

    report = json.loads((tmp_path / "report.json").read_text())
    assert report["base_proxies"]["nll"] == 2.5
    runs = {row["run"]: row for row in report["runs"]}
    assert runs["sft-s0"]["proxies"] == {
        "regions": 7,
        "tokens": 90,
        "nll": 1.25,
        "top1_accuracy": 0.5,
        "region_exact_match": 0.25,
        "mean_p": 0.6,
    }
    assert runs["dft-s0"]["proxies"] is None
    markdown = (tmp_path / "report.md").read_text()
    rows = [line for line in markdown.splitlines() if line.startswith(("| base", "| sft-s0 | 7", "| dft-s0 | not"))]
    assert rows == [
        "| base | 7 | 90 | 2.500 | 0.500 | 0.250 | 0.600 |",
        "| sft-s0 | 7 | 90 | 1.250 | 0.500 | 0.250 | 0.600 |",
        "| dft-s0 | not run yet |  |  |  |  |  |",
    ]
    assert "mean p (the paper's finding, not a judge)" in markdown


def progress_log(folder: Path, name: str, weights: list[float | None]) -> None:
    """A training log: one step per weight, a minute apart, then its done line."""
    rows = [
        {"type": "progress", "step": step, "ce": 1.0 / step, "weight_mean": weight, "time": 60.0 * step}
        for step, weight in enumerate(weights, start=1)
    ]
    (folder / name).write_text("".join(json.dumps(row) + "\n" for row in [*rows, {"type": "done"}]))


def test_the_comparison_report_counts_verdicts_and_shows_training_and_plots(tmp_path, monkeypatch):
    elementwise = load_script("run_elementwise")
    monkeypatch.setattr(elementwise, "COMPARE_DIR", tmp_path)
    monkeypatch.setattr(elementwise, "RESULTS_DOC", tmp_path / "results.md")
    for run, weights in (("sft-s0", [None, None, None]), ("dft-s0", [1.0, 0.9, 0.8])):
        for name in elementwise.EVAL_SETS:
            results = eval_results(0.5)
            results["aggregate"]["verdicts"] = {"pass": 1, "compile_error": 3}
            write_json(tmp_path / run / f"eval_{name}" / "results.json", results)
        progress_log(tmp_path / run, "progress.jsonl", weights)
    # dft-s0 lost its weights and is training again: its figures are those of the first training
    progress_log(tmp_path / "dft-s0", "progress.lost-weights.jsonl", [1.0, 0.9, 0.8, 0.7, 0.6])

    elementwise.report()

    markdown = (tmp_path / "report.md").read_text().splitlines()
    assert "| run | problems | answers | compile_error | pass |" in markdown
    assert "| sft-s0 | unseen | 4 | 3 | 1 |" in markdown
    training = [line for line in markdown if line.startswith(("| sft-s0 | 3 |", "| dft-s0 | 5 |"))]
    assert [line.split(" | ")[:5] for line in training] == [
        ["| sft-s0", "3", "2.0", "0.611", "n/a"],
        ["| dft-s0", "5", "4.0", "0.457", "0.6000"],
    ]
    assert "![held-out metrics per run](metrics.png)" in markdown
    assert (tmp_path / "metrics.png").stat().st_size > 0 and (tmp_path / "curves.png").stat().st_size > 0


def finished_run(folder: Path) -> Path:
    """A run folder as a new checkout has it: the progress log of a finished run, no weights."""
    folder.mkdir(parents=True)
    (folder / "progress.jsonl").write_text(json.dumps({"type": "done", "step": 50}) + "\n")
    return folder


def test_a_finished_run_without_its_weights_gets_the_shipped_copy_or_trains_again(tmp_path, monkeypatch):
    elementwise = load_script("run_elementwise")
    monkeypatch.setattr(elementwise, "COMPARE_DIR", tmp_path)
    monkeypatch.setattr(elementwise, "RESULTS_DOC", tmp_path / "results.md")

    (name,) = elementwise.SHIPPED_FROM
    shipped = finished_run(tmp_path / name)
    assert not elementwise.weights_lost(name, shipped)
    elementwise.ensure_weights(name, shipped)
    assert (shipped / "adapter_model.safetensors").stat().st_size > 1_000_000
    assert (shipped / "adapter_config.json").is_file()

    lost = finished_run(tmp_path / "dft-s0")
    assert elementwise.weights_lost("dft-s0", lost)  # so the comparison runs it after new runs
    elementwise.ensure_weights("dft-s0", lost)
    assert not (lost / "progress.jsonl").exists() and (lost / "progress.lost-weights.jsonl").is_file()
    (lost / "progress.jsonl").write_text(json.dumps({"type": "done", "step": 50}) + "\n")  # lost once more
    elementwise.ensure_weights("dft-s0", lost)
    assert [path.name for path in lost.iterdir()] == ["progress.lost-weights.jsonl"]

    done = finished_run(tmp_path / "cuset-s0")  # every stage that needs weights has run
    for name in elementwise.EVAL_SETS:
        write_json(done / f"eval_{name}" / "results.json", eval_results(0.5))
    write_json(done / "confidence" / "report.json", confidence_summary(1.0))
    elementwise.ensure_weights("cuset-s0", done)
    assert sorted(path.name for path in done.iterdir()) == ["confidence", "eval_seen", "eval_unseen", "progress.jsonl"]


def test_the_report_pairs_every_objective_with_sft_and_each_seed_with_its_first(tmp_path, monkeypatch):
    from eval_support import BROKEN, PASS, write_results

    elementwise = load_script("run_elementwise")
    monkeypatch.setattr(elementwise, "COMPARE_DIR", tmp_path)
    monkeypatch.setattr(elementwise, "RESULTS_DOC", tmp_path / "results.md")
    problems = {"unseen": ["u1", "u2", "u3"], "seen": ["s1", "s2"]}
    solved = {"sft-s0": set(), "sft-s1": {"u1"}, "cuset-s0": {"u1", "u2", "s1"}, "dft-s0": {"u3"}}
    for run, passing in solved.items():
        for name, ids in problems.items():
            scored = {pid: (PASS, [PASS] * 4) if pid in passing else (BROKEN, [BROKEN] * 4) for pid in ids}
            write_results(tmp_path / run / f"eval_{name}" / "results.json", scored, (1, 4))
    write_results(tmp_path / "cuset-s1" / "eval_unseen" / "results.json", {"u1": (PASS, [PASS] * 4)}, (1, 4))

    comparisons = {(entry["comparison"], entry["set"]): entry for entry in elementwise.paired_comparisons()}

    # cuset-s1 has not finished its seen set, so cuset has one seed against sft's first
    assert sorted(comparisons) == sorted(
        (name, eval_set)
        for name in ("cuset - sft", "dft - sft", "sft s1 - s0")
        for eval_set in ("unseen", "seen", "both")
    )
    pass4 = {
        key: next(i for i in entry["intervals"] if i["metric"] == "sampled:cpu_correct@4")
        for key, entry in comparisons.items()
    }
    assert pass4["cuset - sft", "unseen"]["difference"] == pytest.approx(2 / 3)
    assert pass4["cuset - sft", "both"]["problems"] == 5
    assert pass4["cuset - sft", "both"]["difference"] == pytest.approx(3 / 5)
    assert pass4["sft s1 - s0", "unseen"]["difference"] == pytest.approx(1 / 3)
    assert pass4["dft - sft", "seen"]["difference"] == 0.0
    assert {entry["seeds"] for entry in comparisons.values()} == {1}

    lines = elementwise.comparison_lines(list(comparisons.values()))
    row = next(line for line in lines if line.startswith("| cuset - sft | both (5) |"))
    seeds, greedy_compile = row.split(" | ")[2:4]
    assert seeds == "1" and greedy_compile.startswith("+0.600 [")  # u1, u2 and s1 of 5 problems, sft none


def test_the_report_refreshes_its_block_of_the_results_page_and_nothing_else(tmp_path, monkeypatch):
    elementwise = load_script("run_elementwise")
    monkeypatch.setattr(elementwise, "COMPARE_DIR", tmp_path / "experiments" / "comparison")
    doc = tmp_path / "docs" / "results.md"
    monkeypatch.setattr(elementwise, "RESULTS_DOC", doc)
    for name in elementwise.EVAL_SETS:
        write_json(elementwise.COMPARE_DIR / "sft-s0" / f"eval_{name}" / "results.json", eval_results(0.5))
    doc.parent.mkdir()
    doc.write_text(
        "# Results\n\nprose\n<!-- generated:elementwise:begin -->\nold\n<!-- generated:elementwise:end -->\nmore prose\n"
    )

    elementwise.report()

    text = doc.read_text()
    head, block = text.split("<!-- generated:elementwise:begin -->\n")
    block, tail = block.split("<!-- generated:elementwise:end -->")
    assert (head, tail) == ("# Results\n\nprose\n", "\nmore prose\n")
    assert "old" not in block and "| sft-s0 | unseen | 0.500 |" in block
    assert "#### Verdicts (greedy and sampled answers together)" in block.splitlines()
    assert "![held-out metrics per run](../experiments/comparison/metrics.png)" in block.splitlines()


def test_the_adapter_to_ship_is_the_best_over_both_sets_with_ties_to_the_earlier_run():
    elementwise = load_script("run_elementwise")

    def row(run: str, unseen: dict, seen: dict) -> dict:
        empty = {heading: 0.0 for heading in elementwise.BEST_RUN_KEYS}
        return {"run": run, "unseen": {**empty, **unseen, "problems": 10}, "seen": {**empty, **seen, "problems": 5}}

    rows = [
        row("sft-s0", {}, {"pass@4": 0.4}),  # pass@4 over 15 problems: 2/15
        row("cuset-s0", {"pass@4": 0.1}, {"pass@4": 0.2}),  # 2/15 as well
        row("cuset_v1-s0", {}, {"pass@4": 0.4, "greedy cpu_correct@1": 0.2}),  # 2/15, and a greedy pass
    ]
    assert "**cuset_v1-s0** (pass@4 0.133, greedy cpu_correct@1 0.067" in elementwise.best_run_lines(rows)[2]
    assert "**sft-s0**" in elementwise.best_run_lines(rows[:2])[2]


def test_level_one_holds_out_whole_problems_that_fit_the_eval_and_never_an_elementwise_one():
    from cuset_core.data.records import Message, Record

    level1 = load_script("run_level1")
    elementwise_problems = set(level1.elementwise.KERNELBENCH_OPS)

    def record(group: str, answer_tokens: int) -> Record:
        answer = KERNEL_ANSWER.replace("class ModelNew", f'PAD = "{"pad " * answer_tokens}"\n\nclass ModelNew')
        messages = [Message(role="user", content="p"), Message(role="assistant", content=answer)]
        return Record(messages=messages, line=1, group=group, problem=PROBLEM)

    records = [record(f"1/{n}", 100) for n in range(1, 41) for _ in range(2)]
    records += [record("1/41", 5_000), record("2/3", 100)]  # too long to finish; level 2

    def count(text: str) -> int:
        return text.count("pad ")

    split = level1.level1_split(records, count)

    assert len(split.held_out) == level1.HELD_OUT and split.held_out == level1.level1_split(records, count).held_out
    assert "1/41" not in split.held_out and not {g.removeprefix("1/") for g in split.held_out} & elementwise_problems
    trained = {record.group for record in split.train}
    assert not trained & set(split.held_out) and "2/3" not in trained and "1/41" in trained
    assert not {g.removeprefix("1/") for g in trained} & elementwise_problems
    assert trained | set(split.held_out) == {f"1/{n}" for n in range(1, 42) if str(n) not in elementwise_problems}
    assert all("one thread per element" not in record.answer for record in split.train)  # answers compacted


def test_the_half_billion_self_training_draws_a_seeded_quarter_of_the_pool_and_starts_from_the_comparisons_run(
    tmp_path, monkeypatch
):
    self_training = load_script("run_self_training")
    pool = "".join(json.dumps({"id": f"p{n}", "problem": PROBLEM}) + "\n" for n in range(96))
    subset = self_training.pool_subset(pool)
    ids = [json.loads(line)["id"] for line in subset.splitlines()]
    assert len(ids) == len(set(ids)) == self_training.QWEN_POOL_PROBLEMS and subset == self_training.pool_subset(pool)
    assert ids == sorted(ids, key=lambda i: int(i[1:]))  # in the pool's order

    monkeypatch.setattr(self_training, "COMPARISON", tmp_path / "comparison")
    monkeypatch.setattr(self_training.common, "ROOT", tmp_path)  # the log names paths from the root
    trained = tmp_path / "comparison" / "cuset-s0"
    trained.mkdir(parents=True)
    for name in ("adapter_config.json", "adapter_model.safetensors", "job_base.json", "cuset_base.json"):
        (trained / name).write_text(name)
    (trained / "progress.jsonl").write_text(json.dumps({"type": "progress", "step": 20}) + "\n")
    start = tmp_path / "runs" / "cuset-s0"

    self_training.start_from_comparison("cuset", start)
    assert not start.exists()  # the comparison's run has not finished: nothing to start from

    (trained / "progress.jsonl").write_text(json.dumps({"type": "done"}) + "\n")
    self_training.start_from_comparison("cuset", start)
    assert sorted(path.name for path in start.iterdir()) == sorted(path.name for path in trained.iterdir())
    assert (start / "adapter_model.safetensors").read_text() == "adapter_model.safetensors"


def test_a_gate_steps_adapter_joins_the_evaluations_its_folder_already_holds(tmp_path):
    elementwise = load_script("run_elementwise")
    run_dir = tmp_path / "sft-s0"
    checkpoint = run_dir / "checkpoint-20"
    checkpoint.mkdir(parents=True)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (checkpoint / name).write_text(name)
    assert elementwise.snapshot(run_dir, 40) is None  # not saved yet
    greedy_results(run_dir / "step-20" / "eval_unseen", 0.5, 0.1)  # evaluated in another checkout

    step = elementwise.snapshot(run_dir, 20)

    assert step == run_dir / "step-20" and elementwise.snapshot(run_dir, 20) == step
    assert (step / "adapter_model.safetensors").read_text() == "adapter_model.safetensors"
    assert (step / "eval_unseen" / "results.json").is_file() and (step / "cuset_base.json").is_file()
    assert not list(run_dir.glob(".step-*"))


def test_the_half_billion_rule_ships_the_best_run_on_the_unseen_operations_not_on_both_sets(monkeypatch):
    elementwise = load_script("run_elementwise")

    def row(run: str, unseen: float, seen: float) -> dict:
        figures = {"pass@4": 0.0, "greedy cpu_correct@1": 0.0, "compile@4": 0.0}
        return {
            "run": run,
            "unseen": {**figures, "pass@4": unseen, "problems": 10},
            "seen": {**figures, "pass@4": seen, "problems": 5},
        }

    rows = [row("sft-s0", 0.1, 0.8), row("cuset-s0", 0.2, 0.2)]  # pooled: sft 0.333, cuset 0.2
    assert "**sft-s0**" in "".join(elementwise.best_run_lines(rows))
    monkeypatch.setattr(elementwise, "SHIP_SET", "unseen")
    lines = "".join(elementwise.best_run_lines(rows))
    assert "**cuset-s0** (pass@4 0.200" in lines and "on the unseen operations" in lines
