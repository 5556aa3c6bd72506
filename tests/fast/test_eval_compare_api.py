"""What a stored eval gives back besides its own rows: ``GET /v1/evals/compare`` (two evals of the
same problems compared metric by metric with paired bootstrap intervals, as ``cuset eval-compare``
compares two results files) and ``GET /v1/evals/{id}/kernelbench_run`` (its samples as KernelBench
writes a run)."""

from __future__ import annotations

from db.models import EvalProblem
from db.session import session_scope
from tests.integration.job_support import insert_scored_eval
from tests.sqlite_service import FAST_OWNER, OTHER_OWNER

PROBLEMS = [f"p{i:02d}" for i in range(12)]


def stored_eval(settings, eval_id: str, passes: set[str], status: str = "succeeded", owner: str = FAST_OWNER) -> str:
    return insert_scored_eval(settings.resolved_database_url, eval_id, PROBLEMS, passes, owner=owner, status=status)


def test_two_evals_of_the_same_problems_compare_with_paired_intervals(fast_client, fast_settings):
    better = stored_eval(fast_settings, "eval-better", set(PROBLEMS[:10]))
    worse = stored_eval(fast_settings, "eval-worse", set(PROBLEMS[:2]))
    response = fast_client.get("/v1/evals/compare", params={"a": better, "b": worse, "resamples": 1000})
    assert response.status_code == 200, response.text
    comparison = response.json()
    by_metric = {i["metric"]: i for i in comparison["intervals"]}
    greedy = by_metric["greedy:cpu_correct@1"]
    assert (greedy["problems"], round(greedy["a"], 3), round(greedy["b"], 3)) == (12, 0.833, 0.167)
    assert greedy["low"] > 0  # 8 of 12 problems better, none worse: the interval excludes 0
    assert "sampled:cpu_correct@2" in by_metric and comparison["tier"] == "cpu"


def test_only_the_owners_succeeded_evals_of_the_same_problems_compare(fast_client, fast_settings):
    done = stored_eval(fast_settings, "eval-done", set(PROBLEMS[:3]))
    running = stored_eval(fast_settings, "eval-running", set(), status="running")
    with session_scope(fast_settings.resolved_database_url) as session:
        session.get(EvalProblem, ("eval-done", PROBLEMS[0])).problem_id = "elsewhere"
    other = stored_eval(fast_settings, "eval-other", set())
    answers = {
        "running": fast_client.get("/v1/evals/compare", params={"a": done, "b": running}),
        "unknown": fast_client.get("/v1/evals/compare", params={"a": "eval-nope", "b": done}),
        "different problems": fast_client.get("/v1/evals/compare", params={"a": done, "b": other}),
    }
    assert (answers["running"].status_code, answers["running"].json()["error"]["param"]) == (400, "b")
    assert (answers["unknown"].status_code, answers["unknown"].json()["error"]["param"]) == (404, "a")
    refused = answers["different problems"]
    assert refused.status_code == 400 and "different problems" in refused.json()["error"]["message"]
    theirs = stored_eval(fast_settings, "eval-theirs", set(PROBLEMS), owner=OTHER_OWNER)
    answer = fast_client.get("/v1/evals/compare", params={"a": other, "b": theirs})
    assert (answer.status_code, answer.json()["error"]["param"]) == (404, "b")


def test_an_evals_samples_download_as_a_kernelbench_run(fast_client, fast_settings):
    import io
    import json
    import tarfile

    problems = ["19_ReLU", "20_LeakyReLU", "mine"]
    eval_id = insert_scored_eval(
        fast_settings.resolved_database_url, "eval-kb", problems, {"19_ReLU"}, owner=FAST_OWNER
    )
    response = fast_client.get(f"/v1/evals/{eval_id}/kernelbench_run", params={"level": 1})
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(response.content)) as archive:
        names = sorted(archive.getnames())
        results = json.load(archive.extractfile(f"{eval_id}/eval_results.json"))
    kernels = [n for n in names if n.endswith("_kernel.py")]
    # Three samples of each numbered problem; "mine" has no KernelBench number and is left out.
    assert kernels == [f"{eval_id}/level_1_problem_{p}_sample_{s}_kernel.py" for p in (19, 20) for s in range(3)]
    assert [r["correctness"] for r in results["19"]] == [True] * 3 and not any(r["correctness"] for r in results["20"])
    assert results["19"][0]["metadata"]["cuset_tier"] == "cpu"
    missing = fast_client.get(f"/v1/evals/{eval_id}/kernelbench_run")
    assert (missing.status_code, missing.json()["error"]["param"]) == (400, "level")
