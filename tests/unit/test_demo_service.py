"""What the demo prints at its end: the first kernel that passed, or plainly that none did."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "demo_service.py"


def demo():
    spec = importlib.util.spec_from_file_location("demo_service", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["demo_service"] = module
    spec.loader.exec_module(module)
    return module


def sample(verdict: str, tiers: list[str], code: str | None = "x = 1") -> dict:
    decided = tiers[-1]
    return {
        "text": code or "no code",
        "code": code,
        "finish_reason": "stop",
        "verification": {
            "verdict": verdict,
            "tier": decided,
            "tiers_run": tiers,
            "reason": f"{verdict} reason",
            "tier_verdicts": {t: "pass" if t != decided else verdict for t in tiers},
        },
    }


def test_the_first_passing_sample_is_shown_with_every_tiers_verdict(tmp_path, capsys):
    module = demo()
    samples = [
        sample("no_code", ["static"], None),
        sample("pass", ["static", "compile", "cpu"], "kernel = 2"),
        sample("pass", ["static", "compile", "cpu"], "kernel = 3"),
    ]
    module.show_generation({"samples": samples, "timings": {}}, "10_softplus", tmp_path)
    printed = capsys.readouterr().out
    assert "kernel = 2" in printed and "kernel = 3" not in printed
    assert "every tier run: static pass, compile pass, cpu pass" in printed
    assert "verdict: pass" in printed and "no candidate passed" not in printed
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"generated_10_softplus_{i}.md" for i in range(3)]


def test_when_no_sample_passes_it_says_so_and_shows_the_one_that_got_furthest(tmp_path, capsys):
    module = demo()
    samples = [
        sample("no_code", ["static"], None),
        sample("compile_error", ["static", "compile"], "almost = 1"),
        sample("static_reject", ["static"], "copy = 1"),
    ]
    module.show_generation({"samples": samples, "timings": {}}, "10_softplus", tmp_path)
    printed = capsys.readouterr().out
    assert "no candidate passed: the best of 3 stopped at compile_error (tier compile)" in printed
    assert "almost = 1" in printed and "verdict: pass" not in printed


def test_progress_never_shows_none_while_the_job_validates():
    module = demo()
    assert module._steps_text({"step": None, "total_steps": None, "eta_s": None}) == ""
    assert module._steps_text({"step": 2, "total_steps": 4, "eta_s": 5.2}) == ": step 2/4, ETA 5 s"


def test_the_chosen_kernel_is_shown_and_attempts_never_drawn_are_counted_once(tmp_path, capsys):
    module = demo()
    samples = [
        sample("value_mismatch", ["static", "compile", "cpu"], "wrong = 1"),
        sample("pass", ["static", "compile", "cpu"], "right = 2"),
        {"text": "", "code": "", "finish_reason": None, "verification": None, "cancelled": True},
    ]
    module.show_generation({"samples": samples, "chosen": 1, "timings": {}}, "06_sigmoid", tmp_path)
    printed = capsys.readouterr().out
    assert "right = 2" in printed and "sample 1 of 2 for 06_sigmoid" in printed
    assert "1 more not drawn: a kernel had passed" in printed and "verdict: pass" in printed
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "generated_06_sigmoid_0.md",
        "generated_06_sigmoid_1.md",
    ]


def test_the_shipped_adapter_writes_when_listed_else_the_tuned_model_and_both_stop_at_a_pass():
    module = demo()
    args = module.parse_args([])
    assert (args.adapter, args.problem) == ("cuset-ew-135m", "06_sigmoid")
    best_of_8 = {"best_of": 8, "stop_at_first_pass": True, "temperature": 0.7, "top_p": 0.95}
    model, decoding, told = module.generation_plan(["smollm2-135m", "cuset-ew-135m"], "ft:demo", args)
    assert (model, decoding) == ("cuset-ew-135m", best_of_8)
    assert told == "the shipped adapter cuset-ew-135m, up to 8 samples until one passes"
    model, decoding, told = module.generation_plan(["smollm2-135m"], "ft:demo", args)
    assert (model, decoding) == ("ft:demo", best_of_8)
    assert "cuset-ew-135m is not in this installation" in told and "up to 8 samples until one passes" in told
