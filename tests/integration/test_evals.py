"""/v1/evals against the real service: a worker generates with the tiny model, verifies every
sample and records a row per problem; validation names the offending field."""

from __future__ import annotations

import json
import time

import pytest

from cuset_core.demo import HELD_OUT, demo_problems
from cuset_core.verify.result import Verdict
from db.ids import new_id
from db.models import Eval
from db.session import session_scope
from service.reaping import reap_evals
from tests.integration.job_support import insert_eval, insert_file, insert_job
from tests.real_service import wait_for

FAST = {"model": "tiny", "samples": 0, "max_tokens": 32, "tier": "static", "problems": "demo:held-out"}
VERDICTS = {v.value for v in Verdict}


def _store_file(settings, purpose: str, rows: list[dict]) -> str:
    """A File row and its JSONL content under the artifact root, as an upload leaves them."""
    file_id = new_id("file")
    content = "".join(json.dumps(row) + "\n" for row in rows)
    relative = f"files/{file_id}.jsonl"
    (settings.artifacts / "files").mkdir(parents=True, exist_ok=True)
    (settings.artifacts / relative).write_text(content)
    return insert_file(
        settings.resolved_database_url,
        file_id,
        filename="problems.jsonl",
        purpose=purpose,
        bytes=len(content.encode()),
        path=relative,
        records=len(rows),
        total_rows=len(rows),
    )


def _eval_file(client, rows: list[dict]) -> str:
    """An eval file uploaded through POST /v1/files."""
    content = "".join(json.dumps(row) + "\n" for row in rows).encode()
    response = client.post(
        "/v1/files", data={"purpose": "eval"}, files={"file": ("problems.jsonl", content, "application/jsonl")}
    )
    assert response.status_code == 200, response.text
    return response.json()["id"]


def _wait_finished(client, eval_id: str, timeout: float = 240) -> tuple[dict, list[int]]:
    """Poll until the eval leaves queued/running; returns it and every progress.done seen."""
    seen: list[int] = []

    def finished():
        body = client.get(f"/v1/evals/{eval_id}").json()
        seen.append(body["progress"]["done"])
        return body if body["status"] not in ("queued", "running") else None

    return wait_for(finished, timeout=timeout, interval=0.3, what=f"eval {eval_id} to finish"), seen


def _all_problems(client, eval_id: str, limit: int) -> list[dict]:
    rows, after = [], None
    while True:
        params = {"limit": limit} | ({"after": after} if after else {})
        page = client.get(f"/v1/evals/{eval_id}/problems", params=params).json()
        rows += page["data"]
        if not page["has_more"]:
            return rows
        after = page["last_id"]


def test_demo_eval_progresses_to_succeeded_with_aggregate_and_a_row_per_problem(client, worker):
    created = client.post("/v1/evals", json=FAST | {"samples": 2, "tier": "compile", "batch_size": 1})
    assert created.status_code == 200, created.text
    body = created.json()
    assert body["object"] == "eval" and body["status"] == "queued" and body["model"] == "tiny"
    assert body["progress"] == {"done": 0, "generated": 0, "total": 4}
    assert body["config"]["samples"] == 2 and body["config"]["max_new_tokens"] == 32

    final, seen = _wait_finished(client, body["id"])
    assert final["status"] == "succeeded", (final, worker.log()[-3000:])
    assert final["progress"] == {"done": 4, "generated": 4, "total": 4}
    assert seen == sorted(seen), "progress never goes back"
    assert final["finished_at"] >= final["created_at"] and final["error"] is None
    aggregate = final["aggregate"]
    # a greedy sample apart and 2 i.i.d. samples per problem
    assert aggregate["problems"] == 4 and aggregate["samples"] == 12 and aggregate["tier"] == "compile"
    assert set(aggregate["greedy"]["metrics"]) == {"compile@1"} and aggregate["greedy"]["problems"] == 4
    assert set(aggregate["sampled"]["metrics"]) == {"compile@1", "compile@2"} and aggregate["sampled"]["samples"] == 8
    metrics = [*aggregate["greedy"]["metrics"].values(), *aggregate["sampled"]["metrics"].values()]
    assert all(0.0 <= value <= 1.0 for value in metrics)
    assert sum(aggregate["verdicts"].values()) == 12

    problems = _all_problems(client, body["id"], limit=3)
    assert sorted(p["id"] for p in problems) == sorted(HELD_OUT)
    verdicts: dict[str, int] = {}
    for problem in problems:
        assert problem["object"] == "eval.problem" and problem["row"]["n"] == 2 and problem["row"]["greedy"]["n"] == 1
        assert [(s["index"], s["greedy"]) for s in problem["samples"]] == [(0, True), (1, False), (2, False)]
        for sample in problem["samples"]:
            assert isinstance(sample["answer"], str) and isinstance(sample["code"], str)
            assert sample["result"]["verdict"] in VERDICTS and "log" in sample["result"]
            assert 0 < sample["completion_tokens"] <= 32
            verdicts[sample["result"]["verdict"]] = verdicts.get(sample["result"]["verdict"], 0) + 1
    assert verdicts == aggregate["verdicts"]

    refused = client.post(f"/v1/evals/{body['id']}/cancel")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "eval_not_cancellable"


def test_an_eval_with_repair_rounds_reports_the_figures_within_r_repairs_beside_the_plain_ones(client, worker):
    created = client.post("/v1/evals", json=FAST | {"samples": 1, "repair_rounds": 1, "tier": "compile"})
    assert created.status_code == 200, created.text
    assert created.json()["config"]["repair_rounds"] == 1

    final, _ = _wait_finished(client, created.json()["id"])
    assert final["status"] == "succeeded", (final, worker.log()[-3000:])
    aggregate = final["aggregate"]
    # The plain figures count the drawn samples only: a greedy one and one i.i.d. per problem.
    assert aggregate["samples"] == 8 and sum(aggregate["verdicts"].values()) == 8
    repaired = aggregate["repaired"]
    assert repaired["rounds"] == 1
    assert set(repaired["greedy"]["metrics"]) == set(aggregate["greedy"]["metrics"]) == {"compile@1"}
    assert set(repaired["sampled"]["metrics"]) == set(aggregate["sampled"]["metrics"]) == {"compile@1"}
    for plain, within in ((aggregate["greedy"], repaired["greedy"]), (aggregate["sampled"], repaired["sampled"])):
        assert within["metrics"]["compile@1"] >= plain["metrics"]["compile@1"], "a repair never loses a pass"

    repairs = 0
    for problem in _all_problems(client, final["id"], limit=10):
        samples = problem["samples"]
        drawn = [s for s in samples if s["round"] == 0]
        assert [(s["index"], s["greedy"]) for s in drawn] == [(0, True), (1, False)]
        failed = [s for s in drawn if s["result"]["verdict"] != "pass"]
        fixes = [s for s in samples if s["round"] == 1]
        # every failed drawn sample got one repair, decoded like it (greedy or not) from a longer
        # prompt: the follow-up turn carries the failed answer and its verifier error
        assert sorted(s["repair_of"] for s in fixes) == [s["index"] for s in failed]
        for fix in fixes:
            original = samples[fix["repair_of"]]
            assert fix["greedy"] == original["greedy"] and fix["prompt_tokens"] > original["prompt_tokens"]
            assert fix["result"]["verdict"] in VERDICTS
        assert problem["row"]["repaired"]["repairs"] == len(fixes)
        repairs += len(fixes)
    assert repaired["repairs"] == repairs > 0


def test_eval_over_an_uploaded_eval_file_scores_the_file_problems(client, worker):
    chosen = demo_problems()[:2]
    file_id = _eval_file(client, [{"id": p.id, "problem": p.problem_code} for p in chosen])
    request = {k: v for k, v in FAST.items() if k != "problems"} | {"eval_file": file_id}
    created = client.post("/v1/evals", json=request)
    assert created.status_code == 200, created.text
    assert created.json()["eval_file"] == file_id and created.json()["progress"]["total"] == 2

    final, _ = _wait_finished(client, created.json()["id"])
    assert final["status"] == "succeeded", (final, worker.log()[-3000:])
    assert final["aggregate"]["problems"] == 2
    rows = client.get(f"/v1/evals/{final['id']}/problems").json()["data"]
    assert sorted(row["id"] for row in rows) == sorted(p.id for p in chosen)
    assert all(row["samples"][0]["result"]["tier"] == "static" for row in rows)


def test_the_verification_knobs_are_the_evals_config_with_kernelbench_defaults(client):
    default = client.post("/v1/evals", json=FAST).json()
    knobs = {"trials": 3, "input_seed": 7, "tolerance_profile": "v0", "rtol": 1e-3, "arch": "sm_80"}
    chosen = client.post("/v1/evals", json=FAST | knobs | {"compile_baseline": True}).json()
    for created in (default, chosen):
        client.post(f"/v1/evals/{created['id']}/cancel")
    assert {k: default["config"][k] for k in (*knobs, "atol", "compile_baseline")} == {
        "trials": 5,
        "input_seed": 1000,
        "tolerance_profile": "kernelbench",
        "rtol": None,
        "arch": "sm_90",
        "atol": None,
        "compile_baseline": False,
    }
    assert {k: chosen["config"][k] for k in knobs} == knobs and chosen["config"]["compile_baseline"] is True


def test_eval_file_must_exist_and_have_purpose_eval(client, service_settings):
    request = {k: v for k, v in FAST.items() if k != "problems"}
    unknown = client.post("/v1/evals", json=request | {"eval_file": "file-000000000000000000000000"})
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "eval_file"
    assert unknown.json()["error"]["code"] == "file_not_found"

    training = _store_file(service_settings, "fine-tune", [{"messages": [{"role": "user", "content": "hi"}]}])
    wrong = client.post("/v1/evals", json=request | {"eval_file": training})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "eval_file"
    assert wrong.json()["error"]["code"] == "invalid_file_purpose"

    broken = _store_file(service_settings, "eval", [{"question": "not a problem row"}])
    unreadable = client.post("/v1/evals", json=request | {"eval_file": broken})
    assert unreadable.status_code == 400 and unreadable.json()["error"]["param"] == "eval_file"


def test_cancelled_evals_list_newest_first_in_pages(client):
    ids = []
    for _ in range(3):
        created = client.post("/v1/evals", json=FAST).json()
        cancelled = client.post(f"/v1/evals/{created['id']}/cancel").json()
        assert cancelled["status"] == "cancelled" and cancelled["finished_at"] is not None
        ids.append(created["id"])
    assert client.post(f"/v1/evals/{ids[0]}/cancel").json()["status"] == "cancelled"

    first = client.get("/v1/evals", params={"limit": 2}).json()
    assert first["object"] == "list" and first["has_more"] is True
    assert [e["id"] for e in first["data"]] == [ids[2], ids[1]]
    assert first["first_id"] == ids[2] and first["last_id"] == ids[1]
    second = client.get("/v1/evals", params={"limit": 2, "after": first["last_id"]}).json()
    assert second["data"][0]["id"] == ids[0]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/v1/evals/eval-unknown"),
        ("get", "/v1/evals/eval-unknown/problems"),
        ("post", "/v1/evals/eval-unknown/cancel"),
    ],
)
def test_unknown_eval_is_404_in_the_error_shape(client, method, path):
    response = getattr(client, method)(path)
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["type"] == "not_found_error" and error["code"] == "eval_not_found"
    assert set(error) == {"message", "type", "param", "code"}


def test_cancelling_a_running_eval_stops_it_and_it_stays_cancelled(client, worker):
    created = client.post("/v1/evals", json=FAST | {"samples": 2, "batch_size": 1}).json()
    wait_for(
        lambda: client.get(f"/v1/evals/{created['id']}").json()["status"] != "queued",
        timeout=60,
        interval=0.05,
        what="the worker to claim the eval",
    )
    cancelled = client.post(f"/v1/evals/{created['id']}/cancel").json()
    assert cancelled["status"] == "cancelled"

    # The worker notices before its next batch; whatever it was doing, the row stays cancelled.
    time.sleep(5)
    final = client.get(f"/v1/evals/{created['id']}").json()
    assert final["status"] == "cancelled" and final["aggregate"] is None
    assert final["progress"]["done"] <= final["progress"]["total"] == 4


def _succeeded_job(settings, fine_tuned_model: str, output_dir: str) -> None:
    """A succeeded tuning job whose output folder is ``output_dir`` (relative to the artifact root)."""
    training = _store_file(settings, "fine-tune", [{"messages": [{"role": "user", "content": "hi"}]}])
    insert_job(
        settings.resolved_database_url,
        training,
        status="succeeded",
        fine_tuned_model=fine_tuned_model,
        output_dir=output_dir,
    )


def test_eval_of_a_tuned_model_whose_adapter_is_gone_fails_with_an_error(client, worker, service_settings):
    name = f"ft:tiny:evals:{new_id('x')}"
    _succeeded_job(service_settings, name, "jobs/never-written")
    created = client.post("/v1/evals", json=FAST | {"model": name})
    assert created.status_code == 200, created.text

    final, _ = _wait_finished(client, created.json()["id"], timeout=60)
    assert final["status"] == "failed" and final["aggregate"] is None
    assert final["error"]["code"] == "model_unavailable" and name in final["error"]["message"]
    assert str(service_settings.artifacts) not in final["error"]["message"]


def _running_eval(settings, progress: dict, heartbeat_at: float) -> str:
    return insert_eval(
        settings.resolved_database_url,
        problems="demo:held-out",
        config={"samples": 0},
        status="running",
        progress=progress,
        heartbeat_at=heartbeat_at,
    )


def test_the_reaper_fails_an_eval_whose_generation_stopped_but_not_one_being_verified(service_settings):
    long_ago = time.time() - 10 * service_settings.heartbeat_timeout_s
    generating = _running_eval(service_settings, {"done": 0, "generated": 2, "total": 4}, long_ago)
    verifying = _running_eval(service_settings, {"done": 1, "generated": 4, "total": 4}, long_ago)

    reap_evals(service_settings)

    with session_scope(service_settings.resolved_database_url) as session:
        lost, waiting = session.get(Eval, generating), session.get(Eval, verifying)
        assert lost.status == "failed" and lost.error.code == "worker_lost"
        # Its verification messages are the broker's to redeliver; the eval finishes when they do.
        assert waiting.status == "running" and waiting.error is None


def test_an_adapter_is_evaluated_on_the_prompt_style_it_was_tuned_with(client):
    # The shipped adapter records "compact"; a base model gets kernelbench; a request's style wins.
    styles = {}
    for model, asked in (("cuset-ew-135m", None), ("tiny", None), ("cuset-ew-135m", "kernelbench")):
        request = FAST | {"model": model} | ({"prompt_style": asked} if asked else {})
        created = client.post("/v1/evals", json=request)
        assert created.status_code == 200, created.text
        client.post(f"/v1/evals/{created.json()['id']}/cancel")
        styles[(model, asked)] = created.json()["config"]["prompt_style"]
    assert styles == {
        ("cuset-ew-135m", None): "compact",
        ("tiny", None): "kernelbench",
        ("cuset-ew-135m", "kernelbench"): "kernelbench",
    }


def test_an_eval_of_the_shipped_adapter_takes_its_cards_settings_unless_set(client):
    """POST /v1/evals of cuset-ew-135m verifies to tier cpu at temperature 0.7, top-p 0.95, as its
    card's figures were measured; what the request sets wins; a base model keeps the defaults."""
    configs = {}
    for model, extra in (
        ("cuset-ew-135m", {}),
        ("cuset-ew-135m", {"tier": "static", "temperature": 0.3}),
        ("tiny", {}),
    ):
        request = (
            {k: v for k, v in FAST.items() if k not in ("tier", "temperature", "top_p")} | {"model": model} | extra
        )
        created = client.post("/v1/evals", json=request)
        assert created.status_code == 200, created.text
        client.post(f"/v1/evals/{created.json()['id']}/cancel")
        config = created.json()["config"]
        configs[(model, bool(extra))] = (config["tier"], config["temperature"], config["top_p"])
    assert configs == {
        ("cuset-ew-135m", False): ("cpu", 0.7, 0.95),
        ("cuset-ew-135m", True): ("static", 0.3, 0.95),
        ("tiny", False): ("compile", 0.8, 0.95),
    }
