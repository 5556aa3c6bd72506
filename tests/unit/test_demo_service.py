"""What the demo prints: samples drawn and verified while it writes a kernel (plain lines in a log),
then the first kernel that passed, or plainly that none did."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import httpx
import pytest
from rich.console import Console

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


STREAM = [  # a best-of-3 /v1/generate stream as the API sends it: sample 0 fails, 1 passes, 2 is cancelled
    ("sample.start", {"index": 0, "round": 0, "repair_of": None}),
    ("sample.delta", {"index": 0, "delta": "```python\nx = 1"}),
    ("sample.done", {"index": 0, "text": "```python\nx = 1\n```", "code": "x = 1", "finish_reason": "stop"}),
    ("sample.start", {"index": 1, "round": 0, "repair_of": None}),
    ("sample.verification", {"index": 0, "verification": {"verdict": "compile_error", "tier": "compile"}}),
    ("sample.done", {"index": 1, "text": "```python\nkernel = 2\n```", "code": "kernel = 2", "finish_reason": "stop"}),
    ("sample.verification", {"index": 1, "verification": {"verdict": "pass", "tier": "cpu"}}),
    ("sample.cancelled", {"index": 2}),
    ("generation.done", {"id": "gen-1", "usage": {}, "timings": {"total_s": 12.5}, "chosen": 1}),
]


def sse_text(events) -> str:
    return "".join(f"event: {event}\ndata: {json.dumps(data)}\n\n" for event, data in events) + "data: [DONE]\n\n"


def test_step_3_shows_samples_drawn_and_verified_as_plain_lines_when_not_a_terminal(tmp_path, capsys):
    # It showed a spinner for the whole generation (10 minutes), and nothing at all in a log file.
    module = demo()
    module.console = Console(file=sys.stdout, force_terminal=False, width=200)
    seen = []

    def serve(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, text=sse_text(STREAM), headers={"content-type": "text/event-stream"})

    args = module.parse_args(["--samples", "3"])
    decoding = {"best_of": 3, "stop_at_first_pass": True}
    with httpx.Client(base_url="http://demo", transport=httpx.MockTransport(serve)) as client:
        result = module.generate_kernel(client, "cuset-ew-135m", decoding, args)

    assert seen[0]["stream"] is True and seen[0]["best_of"] == 3
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert [line.split(";")[0] for line in lines] == [
        "sample 0 drawn (stop)",
        "sample 0: compile_error (tier compile)",
        "sample 1 drawn (stop)",
        "sample 1: pass (tier cpu)",
    ]
    assert lines[-1].endswith("2 of 3 samples drawn, 2 verified, 0 s")
    assert result["chosen"] == 1 and result["timings"] == {"total_s": 12.5}
    assert [s["cancelled"] for s in result["samples"]] == [False, False, True]
    assert result["samples"][1]["code"] == "kernel = 2"
    assert module.best_sample(result) == (1, result["samples"][1])


def test_a_quiet_stretch_of_decoding_still_prints_a_line_every_half_minute():
    module = demo()
    watch = module.GenerationWatch(best_of=8, started=100.0)
    assert watch.apply("sample.start", {"index": 0}, now=101.0) is None
    assert watch.apply("sample.delta", {"index": 0, "delta": "x"}, now=120.0) is None
    said = watch.apply("sample.delta", {"index": 0, "delta": "y"}, now=131.0)
    assert said == "decoding sample 0; 0 of 8 samples drawn, 0 verified, 31 s"
    assert watch.apply("sample.delta", {"index": 0, "delta": "z"}, now=140.0) is None


def test_an_error_in_the_stream_stops_the_demo_with_its_message():
    module = demo()
    watch = module.GenerationWatch(best_of=8, started=0.0)
    error = {"error": {"message": "the verifier cannot run tier 2 here", "code": "verifier_unavailable"}}
    with pytest.raises(module.DemoError, match="the verifier cannot run tier 2 here \\(verifier_unavailable\\)"):
        watch.apply("error", error, now=1.0)
