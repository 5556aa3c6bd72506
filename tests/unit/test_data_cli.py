"""`cuset data validate` and `cuset data split` from the command line."""

import json

from typer.testing import CliRunner

from cuset_core.cli import app

ANSWER = '```python\nsrc = """\n__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n"""\n```'
NO_KERNEL = "```python\nclass ModelNew:\n    pass\n```"
runner = CliRunner()


def table_file(tmp_path, n_problems: int = 10, per_problem: int = 3):
    rows = [
        {"question": f"q{p}", "answer": NO_KERNEL if (p, k) == (0, 0) else ANSWER, "level": 1, "problem": str(p)}
        for p in range(n_problems)
        for k in range(per_problem)
    ]
    path = tmp_path / "table.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + "{oops\n")
    return path


def test_validate_prints_a_summary_and_the_issues_and_exits_1_on_errors(tmp_path):
    result = runner.invoke(app, ["data", "validate", str(table_file(tmp_path))])
    assert result.exit_code == 1
    assert "31 rows, 29 kept, 2 errors, 0 warnings" in result.output
    assert "no_cuda_kernel" in result.output and "invalid_json" in result.output


def test_validate_json_lists_every_issue_with_line_field_and_code(tmp_path):
    result = runner.invoke(app, ["data", "validate", str(table_file(tmp_path)), "--json"])
    report = json.loads(result.output)
    assert (report["total"], report["kept"], report["errors"]) == (31, 29, 2)
    assert [(i["line"], i["field"], i["code"], i["severity"]) for i in report["issues"]] == [
        (1, "answer", "no_cuda_kernel", "error"),
        (31, "", "invalid_json", "error"),
    ]


def test_validate_exits_0_when_only_warnings_remain(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text(json.dumps({"prompt": "q", "completion": NO_KERNEL}) + "\n")
    result = runner.invoke(app, ["data", "validate", str(path), "--keep-non-kernel", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output)["counts"] == {"no_cuda_kernel": 1}


def test_a_missing_file_is_one_line_and_exit_2_as_in_every_command(tmp_path):
    missing = str(tmp_path / "none.jsonl")
    result = runner.invoke(app, ["data", "validate", missing])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: data file not found: {missing}"
    for command in (["data", "split", missing, "--out", str(tmp_path / "out")], ["analyze", missing]):
        assert runner.invoke(app, command).exit_code == 2, command


def test_the_exit_codes_are_in_the_help():
    assert "Exit codes: 0 done" in " ".join(runner.invoke(app, ["--help"], terminal_width=200).output.split())


def test_split_writes_chat_files_and_a_manifest_without_shared_groups(tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["data", "split", str(table_file(tmp_path)), "--val-fraction", "0.2", "--seed", "0", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "split.json").read_text())
    assert (manifest["train"]["n_groups"], manifest["val"]["n_groups"]) == (8, 2)
    assert set(manifest["train"]["groups"]).isdisjoint(manifest["val"]["groups"])
    assert manifest["dropped"] == 2
    rows = {
        name: [json.loads(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]
        for name in ("train", "val")
    }
    assert len(rows["train"]) + len(rows["val"]) == 29
    assert {row["group"] for row in rows["val"]} == set(manifest["val"]["groups"])
    assert rows["val"][0]["messages"][-1] == {"role": "assistant", "content": ANSWER}


def test_split_is_the_same_for_the_same_seed(tmp_path):
    path = table_file(tmp_path)
    for name in ("a", "b"):
        runner.invoke(app, ["data", "split", str(path), "--out", str(tmp_path / name)])
    assert (tmp_path / "a" / "val.jsonl").read_text() == (tmp_path / "b" / "val.jsonl").read_text()


def test_data_demo_writes_the_demo_dataset_without_its_held_out_problems(tmp_path):
    from cuset_core.demo import HELD_OUT, demo_problems

    out = tmp_path / "demo.jsonl"
    outcome = CliRunner().invoke(app, ["data", "demo", "--out", str(out)])
    assert outcome.exit_code == 0, outcome.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(demo_problems()) - len(HELD_OUT)
    assert CliRunner().invoke(app, ["data", "validate", str(out)]).exit_code == 0


def test_help_printed_to_a_pipe_is_not_cut_short():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "cuset_core.cli", "eval", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0
    assert "--tolerance-profile" in done.stdout and "…" not in done.stdout
