"""A model's confidence in a stored record's answer: ``GET /v1/files/{id}/records/{n}/analysis?model=``
writes a Generation row of kind ``confidence``, a real Celery worker scores every answer token
with the tiny random model, and the API answers with the tokens and per-region summaries."""

from __future__ import annotations

from sqlalchemy import select

from db.models import Generation
from db.session import session_scope
from tests.integration.job_support import upload_demo_dataset


def test_confidence_of_the_tiny_model_covers_the_answer_and_summarises_regions(client, worker, service_settings):
    file_id = upload_demo_dataset(client)
    response = client.get(f"/v1/files/{file_id}/records/0/analysis", params={"model": "tiny"})
    assert response.status_code == 200, response.text
    body = response.json()
    answer, confidence = body["answer"], body["confidence"]
    assert confidence["model"] == "tiny"
    assert 0 < confidence["low_confidence_threshold"] < 1

    tokens = confidence["tokens"]
    assert tokens and all(0 <= t["p"] <= 1 for t in tokens)
    # In order, without overlaps, and together they are the whole answer.
    assert tokens[0]["start"] == 0 and tokens[-1]["end"] == len(answer)
    assert all(a["end"] <= b["start"] for a, b in zip(tokens, tokens[1:]))
    covered = sum(t["end"] - t["start"] for t in tokens)
    assert covered == len(answer)

    # Every region is summarised by the p of the tokens inside it.
    regions = {r["id"]: r for r in body["analysis"]["regions"]}
    scored = confidence["regions"]
    assert scored and {r["index"] for r in scored} <= set(regions)
    for summary in scored:
        region = regions[summary["index"]]
        inside = [t["p"] for t in tokens if t["start"] < region["end"] and t["end"] > region["start"]]
        assert 0 <= summary["min_p"] <= summary["mean_p"] <= 1
        assert summary["tokens"] >= 1
        assert min(inside) <= summary["min_p"] and summary["mean_p"] <= max(inside)

    # The measurement is a Generation row of kind "confidence", finished.
    with session_scope(service_settings.resolved_database_url) as session:
        row = session.scalars(
            select(Generation).where(Generation.kind == "confidence").order_by(Generation.created_at.desc())
        ).first()
        assert row.status == "succeeded" and row.model == "tiny"
        assert row.request.file_id == file_id and row.request.n == 0


def test_without_a_model_the_analysis_has_no_confidence(client):
    file_id = upload_demo_dataset(client)
    body = client.get(f"/v1/files/{file_id}/records/0/analysis").json()
    assert "confidence" not in body and body["analysis"]["regions"]


def test_an_unknown_model_is_a_404_on_the_model_param(client):
    file_id = upload_demo_dataset(client)
    response = client.get(f"/v1/files/{file_id}/records/0/analysis", params={"model": "no-such-model"})
    assert response.status_code == 404
    assert response.json()["error"]["param"] == "model"


def test_an_unknown_record_is_checked_before_the_model(client):
    file_id = upload_demo_dataset(client)
    response = client.get(f"/v1/files/{file_id}/records/9999/analysis", params={"model": "tiny"})
    assert response.status_code == 404
    assert response.json()["error"]["param"] == "n"
