"""The Files API against the real Postgres: uploads (JSONL, parquet, eval problems), listing,
download, records, analysis, size and row limits, and rejection of malformed files leaving
neither a row nor a file behind."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.main import create_app
from cuset_core.analysis.categories import Category
from cuset_core.demo import demo_problems, demo_record, write_demo_dataset
from db.models import File, Job
from db.session import session_scope
from tests.integration.job_support import insert_file, insert_job

PROBLEMS = demo_problems()[:4]
VALID = PROBLEMS[0].problem_code


def jsonl(*rows) -> bytes:
    return b"".join((row if isinstance(row, bytes) else json.dumps(row).encode()) + b"\n" for row in rows)


def chat(*turns: tuple[str, object]) -> dict:
    return {"messages": [{"role": role, "content": content} for role, content in turns]}


def good_row(i: int = 0) -> dict:
    return demo_record(PROBLEMS[i])


GOOD = good_row()
PROMPT, ANSWER = GOOD["messages"][0]["content"], GOOD["messages"][1]["content"]


def parquet_bytes(rows: list[dict]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


def upload(client, content: bytes, filename: str = "data.jsonl", purpose: str | None = "fine-tune"):
    data = {"purpose": purpose} if purpose is not None else {}
    return client.post("/v1/files", files={"file": (filename, content)}, data=data)


def stored_files(settings) -> set[Path]:
    """Every file under artifacts/files, the .incoming temp folder included."""
    root = settings.artifacts / "files"
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def file_rows(settings) -> int:
    with session_scope(settings.resolved_database_url) as session:
        return session.scalar(select(func.count()).select_from(File))


@pytest.fixture()
def small_client(service_settings, auth_headers):
    """The API with tiny limits: 1 MiB uploads and 3 rows per file."""
    app = create_app(service_settings.model_copy(update={"max_upload_mb": 1, "max_records_per_file": 3}))
    with TestClient(app, headers=auth_headers) as test_client:
        yield test_client


# ------------------------------------------------------------------ accepted uploads


def test_jsonl_upload_returns_the_openai_file_object(client, service_settings, tmp_path):
    path = tmp_path / "demo.jsonl"
    count = write_demo_dataset(path)
    response = upload(client, path.read_bytes(), "demo.jsonl")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"].startswith("file-") and body["object"] == "file"
    assert body["bytes"] == path.stat().st_size and isinstance(body["created_at"], int)
    assert body["filename"] == "demo.jsonl" and body["purpose"] == "fine-tune"
    # The demo's long records are kept and counted (test_upload_warns_how_many_...).
    assert body["status"] == "processed" and "longer than the default max_seq_len" in body["status_details"]
    assert (body["format"], body["records"], body["total_rows"]) == ("jsonl", count, count)
    stored = service_settings.artifacts / "files" / f"{body['id']}.jsonl"
    assert stored.read_bytes() == path.read_bytes()
    assert not list((service_settings.artifacts / "files" / ".incoming").iterdir())


def test_parquet_upload_is_recognised_by_its_magic(client, service_settings):
    content = parquet_bytes([good_row(i) for i in range(3)])
    body = upload(client, content, "kernels.bin").json()
    assert (body["format"], body["records"]) == ("parquet", 3)
    assert (service_settings.artifacts / "files" / f"{body['id']}.parquet").read_bytes() == content
    lines = [r["line"] for r in client.get(f"/v1/files/{body['id']}/records").json()["data"]]
    assert lines == [1, 2, 3]


def test_a_problem_pool_upload_holds_problems_without_answers(client):
    rows = [{"id": p.id, "problem": p.problem_code} for p in PROBLEMS]
    body = upload(client, jsonl(*rows), "pool.jsonl", "problems").json()
    assert (body["purpose"], body["records"]) == ("problems", len(PROBLEMS))
    records = client.get(f"/v1/files/{body['id']}/records").json()["data"]
    assert records[0]["answer"] is None and "class Model" in records[0]["prompt"]
    listed = client.get("/v1/files", params={"purpose": "problems", "limit": 100}).json()["data"]
    assert {f["purpose"] for f in listed} == {"problems"}


def test_eval_upload_holds_problems(client):
    rows = [{"id": p.id, "problem": p.problem_code} for p in PROBLEMS]
    body = upload(client, jsonl(*rows), "problems.jsonl", "eval").json()
    assert (body["purpose"], body["records"]) == ("eval", len(PROBLEMS))
    records = client.get(f"/v1/files/{body['id']}/records").json()["data"]
    assert records[0]["answer"] is None and "class Model" in records[0]["prompt"]


def test_kept_rows_with_warnings_are_counted_and_shown_per_record(client):
    unfenced = chat(("user", PROMPT), ("assistant", ANSWER.strip("`").removeprefix("python\n")))
    body = upload(client, jsonl(GOOD, unfenced)).json()
    assert body["records"] == 2 and body["warnings"] == 1
    records = client.get(f"/v1/files/{body['id']}/records").json()["data"]
    assert records[0]["warnings"] == []
    assert [w["code"] for w in records[1]["warnings"]] == ["no_code_block"]
    assert records[1]["warnings"][0]["line"] == 2


def test_filenames_are_reduced_to_a_safe_base_name(client):
    assert upload(client, jsonl(GOOD), "../../etc/passwd.jsonl").json()["filename"] == "passwd.jsonl"
    assert upload(client, jsonl(GOOD), "C:\\data\\x.jsonl").json()["filename"] == "x.jsonl"
    long_name = upload(client, jsonl(GOOD), "k" * 400 + ".jsonl").json()["filename"]
    assert len(long_name) <= 200 and long_name.endswith(".jsonl")


# ------------------------------------------------------------------ list, retrieve, delete, content


def test_list_is_newest_first_and_pages_with_after(client):
    ids = [upload(client, jsonl(good_row(i))).json()["id"] for i in range(3)]
    first = client.get("/v1/files", params={"limit": 2}).json()
    assert first["object"] == "list" and first["has_more"] is True
    assert [f["id"] for f in first["data"]] == [ids[2], ids[1]]
    assert (first["first_id"], first["last_id"]) == (ids[2], ids[1])
    second = client.get("/v1/files", params={"limit": 1, "after": first["last_id"]}).json()
    assert [f["id"] for f in second["data"]] == [ids[0]]
    unknown = client.get("/v1/files", params={"after": "file-nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "after"


def test_list_filters_on_purpose(client):
    eval_id = upload(client, jsonl({"id": 1, "problem": PROBLEMS[0].problem_code}), purpose="eval").json()["id"]
    tune_id = upload(client, jsonl(GOOD)).json()["id"]
    evals = client.get("/v1/files", params={"purpose": "eval", "limit": 100}).json()["data"]
    tunes = client.get("/v1/files", params={"purpose": "fine-tune", "limit": 100}).json()["data"]
    assert eval_id in {f["id"] for f in evals} and {f["purpose"] for f in evals} == {"eval"}
    assert tune_id in {f["id"] for f in tunes} and eval_id not in {f["id"] for f in tunes}


def test_retrieve_and_content_download(client):
    content = jsonl(GOOD, good_row(1))
    created = upload(client, content, "two.jsonl").json()
    assert client.get(f"/v1/files/{created['id']}").json() == created
    download = client.get(f"/v1/files/{created['id']}/content")
    assert download.status_code == 200 and download.content == content
    assert "two.jsonl" in download.headers["content-disposition"]


def test_unknown_and_foreign_files_are_404(client, service_settings):
    insert_file(
        service_settings.resolved_database_url,
        "file-foreign0000000000000001",
        owner="someone-else",
        filename="x.jsonl",
        path="files/x.jsonl",
    )
    for file_id in ("file-unknown", "file-foreign0000000000000001"):
        for method, suffix in (("GET", ""), ("GET", "/content"), ("GET", "/records"), ("DELETE", "")):
            response = client.request(method, f"/v1/files/{file_id}{suffix}")
            assert response.status_code == 404, (method, suffix)
            assert response.json()["error"]["code"] == "file_not_found"
    assert "file-foreign0000000000000001" not in {f["id"] for f in client.get("/v1/files?limit=100").json()["data"]}


def test_delete_removes_row_and_file(client, service_settings):
    created = upload(client, jsonl(GOOD)).json()
    stored = service_settings.artifacts / "files" / f"{created['id']}.jsonl"
    assert stored.exists()
    assert client.delete(f"/v1/files/{created['id']}").json() == {
        "id": created["id"],
        "object": "file",
        "deleted": True,
    }
    assert not stored.exists()
    assert client.get(f"/v1/files/{created['id']}").status_code == 404


def test_delete_refuses_a_file_a_job_uses(client, service_settings):
    file_id = upload(client, jsonl(GOOD)).json()["id"]
    insert_job(service_settings.resolved_database_url, file_id, id="ftjob-usesfile000000000000001")
    response = client.delete(f"/v1/files/{file_id}")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "file_in_use"
    assert client.get(f"/v1/files/{file_id}").status_code == 200
    with session_scope(service_settings.resolved_database_url) as session:
        session.delete(session.get(Job, "ftjob-usesfile000000000000001"))
    assert client.delete(f"/v1/files/{file_id}").status_code == 200


# ------------------------------------------------------------------ records and analysis


def test_records_page_with_offset_and_limit(client):
    file_id = upload(client, jsonl(*(good_row(i) for i in range(4)))).json()["id"]
    page = client.get(f"/v1/files/{file_id}/records", params={"offset": 1, "limit": 2}).json()
    assert (page["total"], page["offset"], page["limit"]) == (4, 1, 2)
    assert [(r["index"], r["line"]) for r in page["data"]] == [(1, 2), (2, 3)]
    assert page["data"][0]["prompt"].startswith(good_row(1)["messages"][0]["content"][:50])
    assert page["data"][0]["answer"].startswith("```python")


def test_analysis_of_a_demo_record_has_regions_with_categories(client):
    file_id = upload(client, jsonl(GOOD, good_row(1))).json()["id"]
    body = client.get(f"/v1/files/{file_id}/records/1/analysis").json()
    answer = good_row(1)["messages"][1]["content"]
    assert (body["index"], body["line"], body["answer"]) == (1, 2, answer)
    analysis = body["analysis"]
    assert analysis["schema"] == "cuset.analysis/1" and analysis["regions"]
    categories = {c.value for c in Category}
    assert {r["category"] for r in analysis["regions"]} <= categories
    assert "qualifier" in {s["category"] for s in analysis["spans"]}  # __global__
    for span in analysis["spans"]:
        assert answer[span["start"] : span["end"]] == span["text"]


def test_analysis_of_a_missing_record_is_404_on_n(client):
    file_id = upload(client, jsonl(GOOD)).json()["id"]
    for n in (1, -1):
        response = client.get(f"/v1/files/{file_id}/records/{n}/analysis")
        assert response.status_code == 404
        assert (response.json()["error"]["code"], response.json()["error"]["param"]) == ("record_not_found", "n")


# ------------------------------------------------------------------ limits and rejections


def test_upload_over_the_size_limit_is_413_and_leaves_nothing(small_client, service_settings):
    before_files, before_rows = stored_files(service_settings), file_rows(service_settings)
    response = upload(small_client, jsonl(GOOD) * 600, "big.jsonl")  # about 1.5 MiB
    assert response.status_code == 413
    assert (response.json()["error"]["code"], response.json()["error"]["param"]) == ("file_too_large", "file")
    assert stored_files(service_settings) == before_files and file_rows(service_settings) == before_rows


def test_size_limit_holds_without_a_content_length(small_client, service_settings):
    """A chunked body announces no size: the limit is enforced while the file streams in."""
    boundary = "cusetboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nfine-tune\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n\r\n'
    ).encode()

    def body():
        yield head
        for _ in range(40):
            yield b"x" * 64 * 1024  # 2.5 MiB in all
        yield f"\r\n--{boundary}--\r\n".encode()

    before_files = stored_files(service_settings)
    response = small_client.post(
        "/v1/files", content=body(), headers={"content-type": f"multipart/form-data; boundary={boundary}"}
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "file_too_large"
    assert stored_files(service_settings) == before_files


def _bad_parquet() -> bytes:
    content = parquet_bytes([good_row(0), good_row(1)])
    return content[: len(content) * 2 // 3]


_MESSAGE_NO_CONTENT = {"messages": [{"role": "user", "content": PROMPT}, {"role": "assistant"}]}
MALFORMED = [
    # id, content, filename, purpose, status, code, param, fragments the message must name
    (
        "not_json",
        jsonl(GOOD, b'{"messages": ['),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 2", "invalid_json"],
    ),
    (
        "deeply_nested",
        jsonl(GOOD, b"[" * 200_000),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 2", "invalid_json", "nested too deeply"],
    ),
    (
        "wrong_role_order",
        jsonl(GOOD, chat(("assistant", ANSWER), ("user", PROMPT))),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 2", "messages[0].role", "wrong_role_order"],
    ),
    (
        "empty_assistant",
        jsonl(chat(("user", PROMPT), ("assistant", "  "))),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 1", "messages[1].content", "empty_assistant"],
    ),
    (
        "missing_field",
        jsonl(GOOD, GOOD, _MESSAGE_NO_CONTENT),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 3", "messages[1].content", "missing_field"],
    ),
    (
        "no_code_block",
        jsonl(chat(("user", PROMPT), ("assistant", "Use a kernel."))),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 1", "messages[1].content", "no_cuda_kernel"],
    ),
    (
        "no_global_kernel",
        jsonl(chat(("user", PROMPT), ("assistant", "```python\nimport torch\nx = 1\n```"))),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 1", "messages[1].content", "no_cuda_kernel"],
    ),
    (
        "wrong_type",
        jsonl(chat(("user", PROMPT), ("assistant", 42))),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 1", "messages[1].content", "wrong_type"],
    ),
    (
        "unknown_role",
        jsonl(chat(("robot", PROMPT), ("assistant", ANSWER))),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 1", "messages[0].role", "unknown_role"],
    ),
    (
        "invalid_utf8",
        jsonl(GOOD, b'{"prompt": "\xff\xfe"}'),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 2", "invalid_encoding"],
    ),
    ("empty_file", b"", "d.jsonl", "fine-tune", 400, "invalid_file", "file", ["file", "empty_file"]),
    ("blank_lines_only", b"\n  \n\n", "d.jsonl", "fine-tune", 400, "invalid_file", "file", ["file", "empty_file"]),
    (
        "unknown_format",
        jsonl({"text": "hello"}),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 1", "unknown_format"],
    ),
    ("not_an_object", jsonl([1, 2]), "d.jsonl", "fine-tune", 400, "invalid_file", "file", ["line 1", "wrong_type"]),
    (
        "prompt_without_completion",
        jsonl({"prompt": PROMPT}),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 1", "completion", "missing_field"],
    ),
    (
        "truncated_parquet",
        _bad_parquet(),
        "d.parquet",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["file", "unreadable_file"],
    ),
    (
        "binary_garbage",
        bytes(range(256)),
        "d.bin",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 1", "invalid_json", "line 2", "invalid_encoding"],
    ),
    (
        "over_max_records",
        jsonl(GOOD, GOOD, GOOD, GOOD),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 4", "too_many_records", "limit of 3"],
    ),
    (
        "many_bad_rows",
        jsonl(*[{"messages": [{"role": "robot"}, {"role": "droid"}]}] * 2),
        "d.jsonl",
        "fine-tune",
        400,
        "invalid_file",
        "file",
        ["line 1, messages[0].content: missing_field", "line 2", "(and 3 more)"],
    ),
    (
        "eval_missing_problem",
        jsonl({"id": "a"}),
        "p.jsonl",
        "eval",
        400,
        "invalid_file",
        "file",
        ["line 1", "problem", "missing_field"],
    ),
    (
        "eval_duplicate_id",
        jsonl({"id": "a", "problem": VALID}, {"id": "a", "problem": VALID}),
        "p.jsonl",
        "eval",
        400,
        "invalid_file",
        "file",
        ["line 2", "id", "duplicate_id"],
    ),
    (
        "eval_id_wrong_type",
        jsonl({"id": [1], "problem": "x"}),
        "p.jsonl",
        "eval",
        400,
        "invalid_file",
        "file",
        ["line 1", "id", "wrong_type"],
    ),
    (
        "problem_without_a_model",
        jsonl({"id": "a", "problem": VALID}, {"id": "b", "problem": VALID.replace("class Model", "class Net")}),
        "p.jsonl",
        "problems",
        400,
        "invalid_file",
        "file",
        ["line 2", "problem", "invalid_problem", "'b'", "no top-level `class Model`"],
    ),
    (
        "problem_that_is_not_python",
        jsonl({"id": "a", "problem": "import torch\n\ndef get_inputs(:\n    return []\n"}),
        "p.jsonl",
        "eval",
        400,
        "invalid_file",
        "file",
        ["line 1", "invalid_problem", "line 3: not valid Python"],
    ),
    (
        "eval_as_parquet",
        parquet_bytes([{"id": "a", "problem": "x"}]),
        "p.parquet",
        "eval",
        400,
        "invalid_file",
        "file",
        ["file", "unknown_format", "JSONL"],
    ),
    ("bad_purpose", jsonl(GOOD), "d.jsonl", "training", 400, "invalid_value", "purpose", ["purpose", "'training'"]),
    ("missing_purpose", jsonl(GOOD), "d.jsonl", None, 400, "missing_required_parameter", "purpose", ["purpose"]),
    ("missing_file_part", None, None, "fine-tune", 400, "missing_required_parameter", "file", ["'file'"]),
]


@pytest.mark.parametrize(
    ("content", "filename", "purpose", "status", "code", "param", "fragments"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_malformed_uploads_are_rejected_leaving_nothing(
    small_client, service_settings, content, filename, purpose, status, code, param, fragments
):
    before_files, before_rows = stored_files(service_settings), file_rows(service_settings)
    if content is None:
        response = small_client.post(
            "/v1/files", data={"purpose": purpose}, files={"other": ("x.txt", b"not the file part")}
        )
    else:
        response = upload(small_client, content, filename, purpose)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == (code, param)
    for fragment in fragments:
        assert fragment in error["message"]
    assert file_rows(service_settings) == before_rows
    assert stored_files(service_settings) == before_files


def test_a_body_that_is_not_multipart_is_400(client):
    response = client.post("/v1/files", json={"purpose": "fine-tune"})
    assert response.status_code == 400
    assert (response.json()["error"]["code"], response.json()["error"]["param"]) == ("invalid_request", "file")


def test_a_multipart_body_cut_short_is_400_and_leaves_no_temp_file(client, service_settings):
    boundary = "cusetboundary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="d.jsonl"\r\n\r\n'
    ).encode() + jsonl(GOOD)
    before_files = stored_files(service_settings)
    response = client.post(
        "/v1/files", content=body, headers={"content-type": f"multipart/form-data; boundary={boundary}"}
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request"
    assert stored_files(service_settings) == before_files


def test_upload_warns_how_many_records_exceed_the_default_token_limit(client, tmp_path, tokenizer):
    """Records longer than the default max_seq_len are kept, each with an ``over_token_limit``
    warning counted with the default base model's tokenizer, and the file says how many."""
    from cuset_core.data import LoadOptions, load_records
    from cuset_core.training.config import Hyperparameters

    path = tmp_path / "demo.jsonl"
    write_demo_dataset(path)
    limit = Hyperparameters.model_fields["max_seq_len"].default
    counted = load_records(path, LoadOptions(prompt_style="compact", max_tokens=limit), tokenizer)
    expected = sorted(i.line for i in counted.errors if i.code.value == "over_token_limit")
    assert expected, "the demo dataset has records over the default limit"

    body = upload(client, path.read_bytes(), "demo.jsonl").json()

    assert body["records"] == counted.total  # long records are kept: a job may raise its limit
    assert body["status_details"].startswith(f"{len(expected)} of {counted.total} records are longer")
    records = client.get(f"/v1/files/{body['id']}/records", params={"limit": 100}).json()["data"]
    over = [r["line"] for r in records if any(w["code"] == "over_token_limit" for w in r["warnings"])]
    assert over == expected
    first = next(w for r in records for w in r["warnings"] if w["code"] == "over_token_limit")
    assert f"more than the limit of {limit}" in first["message"] and "docs/data.md" in first["message"]
