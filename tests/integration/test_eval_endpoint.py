"""`cuset eval --model openai:URL#NAME`: generations from an OpenAI-compatible endpoint, here this
project's own server (uvicorn, Postgres, Redis and a Celery worker, all real) serving ``tiny``."""

from __future__ import annotations

import json

import openai
from typer.testing import CliRunner

from cuset_core.cli import app
from cuset_core.demo import HELD_OUT, demo_problems
from cuset_core.generation.prompts import build_messages

KEY_ENV = "CUSET_TEST_ENDPOINT_KEY"


def run_eval(server: str, api_key: str, out, *args: str):
    return CliRunner().invoke(
        app,
        ["eval", "--problems", "demo:held-out", "--tier", "static", "--max-new-tokens", "8", "--quiet", "--no-cache"]
        + ["--api-key-env", KEY_ENV, "--out", str(out), *args],
        env={KEY_ENV: api_key},
    )


def test_an_eval_draws_its_samples_from_an_openai_compatible_endpoint(server, worker, api_key, tmp_path):
    outcome = run_eval(server, api_key, tmp_path / "out", "--model", f"openai:{server}/v1#tiny", "--samples", "2")

    assert outcome.exit_code == 0, outcome.output
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["config"]["model"] == f"openai:{server}/v1#tiny"
    assert api_key not in (tmp_path / "out" / "results.json").read_text()
    samples = results["samples"]
    assert [(s["problem_id"], s["greedy"]) for s in samples] == [
        (pid, greedy) for pid in HELD_OUT for greedy in (True, False, False)
    ]
    assert all(s["prompt_tokens"] > 0 and s["finish_reason"] in ("stop", "length") for s in samples)
    assert all(s["completion_tokens"] is not None for s in samples if s["greedy"])  # n = 1: usage is the sample's
    assert results["aggregate"]["greedy"]["problems"] == len(HELD_OUT)
    assert results["aggregate"]["sampled"]["samples"] == 2 * len(HELD_OUT)
    # the greedy answer is the endpoint's own greedy decode of the same prompt
    first = next(p for p in demo_problems() if p.id == HELD_OUT[0])
    direct = openai.OpenAI(base_url=f"{server}/v1", api_key=api_key, max_retries=0, timeout=120)
    chat = direct.chat.completions.create(
        model="tiny", messages=build_messages(first.problem_code, "kernelbench"), max_tokens=8, temperature=0, seed=0
    )
    assert samples[0]["answer"] == chat.choices[0].message.content


def test_the_endpoints_refusals_are_one_clear_line(server, worker, api_key, tmp_path):
    unknown = run_eval(server, api_key, tmp_path / "a", "--model", f"openai:{server}/v1#no-such-model")
    assert unknown.exit_code == 2
    assert unknown.output.startswith(f"error: model: {server}/v1/chat/completions answered 404: ")
    unauthorised = run_eval(server, "wrong-key", tmp_path / "b", "--model", f"openai:{server}/v1#tiny")
    assert unauthorised.exit_code == 2
    assert unauthorised.output.startswith(f"error: model: {server}/v1/chat/completions answered 401: ")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
