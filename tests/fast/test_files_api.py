"""``/v1/files`` through ``create_app`` on the embedded SQLite database: uploads, rejected rows
named by line and field, cursor pages, download, delete, and other owners' files as 404s."""

from __future__ import annotations

import json

from sqlalchemy import func, select

from cuset_core.demo import demo_problems, demo_record
from cuset_core.training.config import JobSpec
from db.models import File, Generation, Job
from db.session import session_scope
from tests.integration.job_support import insert_file
from tests.sqlite_service import OTHER_OWNER, api_client, enqueued

PROBLEMS = demo_problems()[:3]


def jsonl(*rows: dict | bytes) -> bytes:
    return b"".join((row if isinstance(row, bytes) else json.dumps(row).encode()) + b"\n" for row in rows)


def upload(client, content: bytes, purpose: str | None = "fine-tune", filename: str = "data.jsonl"):
    return client.post(
        "/v1/files", files={"file": (filename, content)}, data={"purpose": purpose} if purpose is not None else {}
    )


def uploaded(client, content: bytes, purpose: str = "fine-tune") -> dict:
    response = upload(client, content, purpose)
    assert response.status_code == 200, response.text
    return response.json()


def stored(settings) -> list:
    """Every file under the upload folder, its temp folder included."""
    root = settings.artifacts / "files"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def file_rows(settings) -> int:
    with session_scope(settings.resolved_database_url) as session:
        return session.scalar(select(func.count()).select_from(File))


def test_an_upload_is_stored_and_described_as_openai_does(fast_client, fast_settings):
    content = jsonl(*(demo_record(p) for p in PROBLEMS))
    body = uploaded(fast_client, content)
    assert body["id"].startswith("file-") and body["object"] == "file" and body["purpose"] == "fine-tune"
    assert (body["bytes"], body["format"], body["records"], body["filename"]) == (
        len(content),
        "jsonl",
        3,
        "data.jsonl",
    )
    assert stored(fast_settings) == [fast_settings.artifacts / "files" / f"{body['id']}.jsonl"]
    assert fast_client.get(f"/v1/files/{body['id']}").json() == body


def test_a_file_with_a_bad_row_is_rejected_by_line_and_field_and_leaves_nothing(fast_client, fast_settings):
    good = demo_record(PROBLEMS[0])
    no_answer = {"messages": [{"role": "user", "content": "write a kernel"}]}
    response = upload(fast_client, jsonl(good, b"{not json", no_answer))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "invalid_file", "file")
    assert "line 2: invalid_json" in error["message"]
    assert "line 3, messages[0].role: wrong_role_order" in error["message"]
    assert (file_rows(fast_settings), stored(fast_settings)) == (0, [])


def test_a_missing_or_unknown_purpose_names_the_field(fast_client, fast_settings):
    content = jsonl(demo_record(PROBLEMS[0]))
    for purpose, code in ((None, "missing_required_parameter"), ("pretraining", "invalid_value")):
        error = upload(fast_client, content, purpose).json()["error"]
        assert (error["param"], error["code"]) == ("purpose", code)
    assert (file_rows(fast_settings), stored(fast_settings)) == (0, [])


def test_the_list_pages_newest_first_with_an_after_cursor(fast_client):
    ids = [uploaded(fast_client, jsonl(demo_record(p)))["id"] for p in PROBLEMS]
    first = fast_client.get("/v1/files", params={"limit": 2}).json()
    assert ([f["id"] for f in first["data"]], first["has_more"]) == ([ids[2], ids[1]], True)
    assert (first["first_id"], first["last_id"]) == (ids[2], ids[1])
    second = fast_client.get("/v1/files", params={"limit": 2, "after": first["last_id"]}).json()
    assert ([f["id"] for f in second["data"]], second["has_more"]) == ([ids[0]], False)
    oldest_first = fast_client.get("/v1/files", params={"order": "asc"}).json()
    assert [f["id"] for f in oldest_first["data"]] == ids


def test_the_list_filters_on_purpose(fast_client):
    tune = uploaded(fast_client, jsonl(demo_record(PROBLEMS[0])))["id"]
    problems = uploaded(fast_client, jsonl({"id": PROBLEMS[0].id, "problem": PROBLEMS[0].problem_code}), "eval")["id"]
    listed = fast_client.get("/v1/files", params={"purpose": "eval"}).json()["data"]
    assert [f["id"] for f in listed] == [problems] and tune != problems


def test_a_bad_page_request_names_its_parameter(fast_client):
    for params, status, param in (({"after": "file-nope"}, 404, "after"), ({"limit": 0}, 400, "limit")):
        response = fast_client.get("/v1/files", params=params)
        assert response.status_code == status
        assert response.json()["error"]["param"] == param


def test_the_content_downloads_as_uploaded(fast_client):
    content = jsonl(demo_record(PROBLEMS[1]))
    file_id = uploaded(fast_client, content)["id"]
    download = fast_client.get(f"/v1/files/{file_id}/content")
    assert download.status_code == 200 and download.content == content
    assert "data.jsonl" in download.headers["content-disposition"]


def test_delete_removes_the_row_and_the_stored_file(fast_client, fast_settings):
    file_id = uploaded(fast_client, jsonl(demo_record(PROBLEMS[0])))["id"]
    assert fast_client.delete(f"/v1/files/{file_id}").json() == {"id": file_id, "object": "file", "deleted": True}
    assert (file_rows(fast_settings), stored(fast_settings)) == (0, [])
    assert fast_client.get(f"/v1/files/{file_id}").status_code == 404


def test_delete_refuses_a_file_a_job_trains_on(fast_client, fast_settings):
    file_id = uploaded(fast_client, jsonl(demo_record(PROBLEMS[0])))["id"]
    with session_scope(fast_settings.resolved_database_url) as session:
        session.add(Job(id="ftjob-uses-it", model="tiny", training_file=file_id, spec=JobSpec()))
    response = fast_client.delete(f"/v1/files/{file_id}")
    assert response.status_code == 409
    assert (response.json()["error"]["code"], response.json()["error"]["param"]) == ("file_in_use", "file_id")
    assert len(stored(fast_settings)) == 1


def test_another_owners_file_is_a_404_like_an_unknown_one(fast_client, fast_settings):
    insert_file(
        fast_settings.resolved_database_url, "file-theirs", owner=OTHER_OWNER, filename="x.jsonl", path="files/x.jsonl"
    )
    for file_id in ("file-unknown", "file-theirs"):
        for method, suffix in (("GET", ""), ("GET", "/content"), ("GET", "/records"), ("DELETE", "")):
            response = fast_client.request(method, f"/v1/files/{file_id}{suffix}")
            assert response.status_code == 404, (method, suffix)
            assert response.json()["error"] == {
                "message": f"No file found with id '{file_id}'.",
                "type": "not_found_error",
                "param": "file_id",
                "code": "file_not_found",
            }
    assert fast_client.get("/v1/files").json()["data"] == []


def test_a_request_without_a_valid_key_is_refused_in_the_error_shape(fast_client):
    response = fast_client.get("/v1/files", headers={"Authorization": "Bearer sk-wrong"})
    assert response.status_code == 401
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert response.json()["error"]["type"] == "authentication_error"


def test_records_page_by_offset_and_an_answer_is_analysed_without_a_model(fast_client):
    file_id = uploaded(fast_client, jsonl(*(demo_record(p) for p in PROBLEMS)))["id"]
    page = fast_client.get(f"/v1/files/{file_id}/records", params={"offset": 1, "limit": 1}).json()
    assert (page["total"], [(r["index"], r["line"]) for r in page["data"]]) == (3, [(1, 2)])
    analysis = fast_client.get(f"/v1/files/{file_id}/records/1/analysis").json()
    assert (analysis["index"], analysis["line"]) == (1, 2) and "confidence" not in analysis
    assert analysis["analysis"]["regions"] and all(r["category"] for r in analysis["analysis"]["regions"])
    missing = fast_client.get(f"/v1/files/{file_id}/records/3/analysis")
    assert missing.status_code == 404
    assert (missing.json()["error"]["param"], missing.json()["error"]["code"]) == ("n", "record_not_found")


def test_a_missing_records_confidence_is_404_and_queues_nothing(fast_client, fast_settings):
    file_id = uploaded(fast_client, jsonl(*(demo_record(p) for p in PROBLEMS)))["id"]
    for n in (3, -1):
        missing = fast_client.get(f"/v1/files/{file_id}/records/{n}/analysis", params={"model": "tiny"})
        assert missing.status_code == 404, missing.text
        assert (missing.json()["error"]["param"], missing.json()["error"]["code"]) == ("n", "record_not_found")
    with session_scope(fast_settings.resolved_database_url) as session:
        assert session.scalar(select(func.count()).select_from(Generation)) == 0
    assert enqueued(fast_settings) == []


def test_an_upload_over_the_size_limit_is_a_413_and_leaves_nothing(fast_settings):
    with api_client(fast_settings.model_copy(update={"max_upload_mb": 1})) as client:
        response = upload(client, jsonl(demo_record(PROBLEMS[0])) * 2000)
    assert response.status_code == 413 and response.json()["error"]["code"] == "file_too_large"
    assert (file_rows(fast_settings), stored(fast_settings)) == (0, [])
