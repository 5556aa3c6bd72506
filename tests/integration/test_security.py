"""Security through the API with auth on: keys on every /v1 route, owner isolation, limits in
the error shape, path traversal, and the verification sandbox facing a hostile candidate.

Each test builds its own app with ``auth=True`` and keys made in the test database, so these
hold whatever the shared fixtures' auth setting is.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from api.main import create_app
from cuset_core.demo import demo_problems
from db.generation_rows import load_samples
from db.generations import GenerationSample
from db.ids import new_id
from db.models import File, Generation
from db.session import session_scope
from tests.integration.job_support import insert_file, insert_generation, insert_job
from tests.integration.security_support import assert_error, bearer, jsonl, new_key, secure_client, training_rows
from tests.real_service import PG_ADMIN_URL, WorkerProcess, fresh_database, wait_for

PROBLEMS = demo_problems()


GOOD_FILE = training_rows()


def upload(client, content: bytes = GOOD_FILE, filename: str = "data.jsonl", purpose: str = "fine-tune"):
    return client.post("/v1/files", files={"file": (filename, content)}, data={"purpose": purpose})


@pytest.fixture(scope="module")
def alice(database_url) -> str:
    return new_key(database_url, owner=f"alice-{secrets.token_hex(3)}")


@pytest.fixture(scope="module")
def bob(database_url) -> str:
    return new_key(database_url, owner=f"bob-{secrets.token_hex(3)}")


@pytest.fixture()
def api(service_settings):
    """An app with auth on (rate limit off); requests pass their key themselves."""
    with secure_client(service_settings) as client:
        yield client


# ------------------------------------------------------------------ keys on every route


def _v1_requests(app) -> list[tuple[str, str]]:
    """(method, path) of every /v1 operation of the app's OpenAPI schema (every route it
    serves), path parameters filled with harmless values."""
    found = []
    for template, operations in app.openapi()["paths"].items():
        if template.startswith("/v1"):
            path = re.sub(r"\{[^}]+\}", "x", template.replace("{n}", "0"))
            found += [(method.upper(), path) for method in operations]
    return found


@pytest.mark.parametrize("case", ["missing", "malformed", "unknown", "revoked"])
def test_every_v1_route_refuses_a_request_without_a_valid_key(service_settings, database_url, case):
    app = create_app(service_settings.model_copy(update={"auth": True}))
    headers = {
        "missing": {},
        "malformed": {"Authorization": "Basic dXNlcjpwYXNz"},
        "unknown": bearer("cuset-sk-" + secrets.token_urlsafe(32)),
        "revoked": bearer(new_key(database_url, revoked=True)),
    }[case]
    requests = _v1_requests(app)
    assert len(requests) >= 20, requests  # files, jobs, models, inference and evals are all mounted

    with TestClient(app) as client:
        for method, path in requests:
            response = client.request(method, path, headers=headers, json={} if method == "POST" else None)
            code = "missing_api_key" if case in ("missing", "malformed") else "invalid_api_key"
            error = assert_error(response, 401, code)
            assert error["type"] == "authentication_error", (method, path)


def test_health_endpoints_stay_open(api):
    assert api.get("/healthz").status_code == 200
    assert api.get("/readyz").status_code == 200


def test_a_valid_key_is_accepted_and_a_revoked_one_stops_working(service_settings, database_url):
    from db.keys import revoke_key

    secret = new_key(database_url)
    # The key cache keeps an owner for KEY_CACHE_TTL_S: revoke before first use so the test is instant.
    with secure_client(service_settings, secret) as client:
        assert client.get("/v1/models").status_code == 200
    other = new_key(database_url)
    with session_scope(database_url) as session:
        revoke_key(session, other[: len("cuset-sk-") + 6])
    with secure_client(service_settings, other) as client:
        assert_error(client.get("/v1/models"), 401, "invalid_api_key")


# ------------------------------------------------------------------ owner isolation


@pytest.fixture(scope="module")
def alices_things(service_settings, database_url, alice) -> dict[str, str]:
    """Alice's file, eval file, job, eval and fine-tuned model (a succeeded job row)."""
    with secure_client(service_settings, alice) as client:
        file_id = upload(client).json()["id"]
        eval_rows = jsonl(*({"id": p.id, "problem": p.problem_code} for p in PROBLEMS[:1]))
        eval_file = upload(client, eval_rows, "problems.jsonl", "eval").json()["id"]
        job = client.post(
            "/v1/fine_tuning/jobs",
            json={"model": "tiny", "training_file": file_id, "hyperparameters": {"max_steps": 1}},
        )
        assert job.status_code == 200, job.text
        evaluation = client.post("/v1/evals", json={"model": "tiny", "eval_file": eval_file, "max_tokens": 8})
        assert evaluation.status_code == 200, evaluation.text
        # Nobody needs them to run: stop them so a worker of this session spends no time on them.
        client.post(f"/v1/fine_tuning/jobs/{job.json()['id']}/cancel")
        client.post(f"/v1/evals/{evaluation.json()['id']}/cancel")
    owner = _owner_of(database_url, alice)
    tuned_job, model = new_id("ftjob"), f"ft:tiny:{owner}:{secrets.token_hex(3)}"
    insert_job(
        database_url,
        file_id,
        id=tuned_job,
        owner=owner,
        status="succeeded",
        fine_tuned_model=model,
        output_dir=f"jobs/{tuned_job}/adapter",
        created_at=time.time(),
        finished_at=time.time(),
    )
    return {
        "file": file_id,
        "eval_file": eval_file,
        "job": job.json()["id"],
        "tuned_job": tuned_job,
        "eval": evaluation.json()["id"],
        "model": model,
    }


def _owner_of(database_url: str, secret: str) -> str:
    from db.keys import owner_of

    with session_scope(database_url) as session:
        return owner_of(session, secret)


def test_another_owners_ids_are_404_like_unknown_ones(api, alices_things, bob):
    things, headers = alices_things, bearer(bob)
    for path in (
        f"/v1/files/{things['file']}",
        f"/v1/files/{things['file']}/content",
        f"/v1/files/{things['file']}/records",
        f"/v1/files/{things['file']}/records/0/analysis",
        f"/v1/fine_tuning/jobs/{things['job']}",
        f"/v1/fine_tuning/jobs/{things['job']}/events",
        f"/v1/fine_tuning/jobs/{things['job']}/checkpoints",
        f"/v1/fine_tuning/jobs/{things['job']}/metrics",
        f"/v1/fine_tuning/jobs/{things['tuned_job']}",
        f"/v1/models/{things['model']}",
        f"/v1/evals/{things['eval']}",
        f"/v1/evals/{things['eval']}/problems",
    ):
        assert_error(api.get(path, headers=headers), 404)
    for path in (f"/v1/fine_tuning/jobs/{things['job']}/cancel", f"/v1/evals/{things['eval']}/cancel"):
        assert_error(api.post(path, headers=headers), 404)
    assert_error(api.delete(f"/v1/files/{things['file']}", headers=headers), 404)
    # Bob's answers for Alice's ids equal those for ids nobody has (no existence oracle).
    unknown = api.get(f"/v1/files/file-{secrets.token_hex(12)}", headers=headers).json()["error"]
    foreign = api.get(f"/v1/files/{things['file']}", headers=headers).json()["error"]
    assert {k: v for k, v in unknown.items() if k != "message"} == {k: v for k, v in foreign.items() if k != "message"}


def test_another_owners_things_are_absent_from_lists(api, alices_things, alice, bob):
    mine = {
        path: {x["id"] for x in api.get(path, headers=bearer(alice), params={"limit": 100}).json()["data"]}
        for path in ("/v1/files", "/v1/fine_tuning/jobs", "/v1/evals", "/v1/models")
    }
    theirs = {
        path: {x["id"] for x in api.get(path, headers=bearer(bob), params={"limit": 100}).json()["data"]}
        for path in mine
    }
    assert {alices_things["file"], alices_things["eval_file"]} <= mine["/v1/files"]
    assert {alices_things["job"], alices_things["tuned_job"]} <= mine["/v1/fine_tuning/jobs"]
    assert alices_things["eval"] in mine["/v1/evals"] and alices_things["model"] in mine["/v1/models"]
    every_alice_id = set(alices_things.values())
    for path, ids in theirs.items():
        assert not ids & every_alice_id, path
    assert "tiny" in theirs["/v1/models"]  # base models are everyone's


def test_another_owners_files_and_models_cannot_be_used(api, alices_things, bob):
    headers = bearer(bob)
    job = api.post(
        "/v1/fine_tuning/jobs", headers=headers, json={"model": "tiny", "training_file": alices_things["file"]}
    )
    assert_error(job, 400, "file_not_found", "training_file")
    tuned_on = api.post(
        "/v1/fine_tuning/jobs",
        headers=headers,
        json={"model": alices_things["model"], "training_file": alices_things["file"]},
    )
    assert_error(tuned_on, 404, "model_not_found", "model")
    evaluation = api.post("/v1/evals", headers=headers, json={"model": "tiny", "eval_file": alices_things["eval_file"]})
    assert_error(evaluation, 400, "file_not_found", "eval_file")
    evaluation = api.post("/v1/evals", headers=headers, json={"model": alices_things["model"], "problems": "demo"})
    assert_error(evaluation, 404, param="model")
    for path, body in (
        ("/v1/completions", {"prompt": "x", "max_tokens": 1}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}),
        ("/v1/generate", {"prompt": "x", "max_tokens": 1}),
    ):
        assert_error(
            api.post(path, headers=headers, json={"model": alices_things["model"], **body}),
            404,
            "model_not_found",
            "model",
        )


# ------------------------------------------------------------------ limits


def test_upload_over_the_size_limit_is_413(service_settings, alice):
    with secure_client(service_settings, alice, max_upload_mb=1) as client:
        response = upload(client, b"x" * (1024 * 1024 + 4096))
    assert_error(response, 413, "file_too_large", "file")


def test_request_body_over_the_limit_is_413(service_settings, alice):
    body = {"model": "tiny", "training_file": "file-x", "metadata": {"k": "v" * 20_000}}
    with secure_client(service_settings, alice, max_request_mb=0.01) as client:
        response = client.post("/v1/fine_tuning/jobs", json=body)
        assert_error(response, 413, "request_too_large")


def test_request_body_streamed_without_a_length_over_the_limit_is_413(service_settings, alice):
    with secure_client(service_settings, alice, max_request_mb=0.01) as client:
        chunks = (b'{"model": "tiny", "pad": "' + b"x" * 4096, *([b"y" * 4096] * 4), b'"}')
        streamed = client.post("/v1/completions", content=iter(chunks), headers={"Content-Type": "application/json"})
        assert_error(streamed, 413, "request_too_large")


def test_file_with_more_records_than_the_limit_is_refused(service_settings, alice):
    with secure_client(service_settings, alice, max_records_per_file=1) as client:
        response = upload(client)
    error = assert_error(response, 400)
    assert "too_many_records" in error["message"] or error["code"] == "too_many_records", error


def test_jobs_per_owner_are_capped(service_settings, database_url):
    secret = new_key(database_url)
    with secure_client(service_settings, secret, max_concurrent_jobs=2) as client:
        file_id = upload(client).json()["id"]
        request = {"model": "tiny", "training_file": file_id, "hyperparameters": {"max_steps": 1}}
        created = [client.post("/v1/fine_tuning/jobs", json=request) for _ in range(2)]
        assert [r.status_code for r in created] == [200, 200], [r.text for r in created]
        try:
            third = client.post("/v1/fine_tuning/jobs", json=request)
            assert_error(third, 429, "concurrent_jobs_limit")
            # A finished (here: cancelled) job frees its place. A running job is "cancelling", and
            # still holds it, until its worker has stopped it.
            first = created[0].json()["id"]
            client.post(f"/v1/fine_tuning/jobs/{first}/cancel")
            wait_for(
                lambda: client.get(f"/v1/fine_tuning/jobs/{first}").json()["status"] not in ("running", "cancelling"),
                what="the cancelled job to stop",
            )
            again = client.post("/v1/fine_tuning/jobs", json=request)
            assert again.status_code == 200, again.text
            created.append(again)
        finally:
            for job in created:
                if job.status_code == 200:
                    client.post(f"/v1/fine_tuning/jobs/{job.json()['id']}/cancel")


def test_requests_over_the_rate_are_429_per_key(service_settings, database_url):
    slow, other = new_key(database_url), new_key(database_url)
    with secure_client(service_settings, rate_limit_rps=1.0, rate_limit_burst=3) as client:
        statuses = [client.get("/v1/models", headers=bearer(slow)) for _ in range(8)]
        assert [r.status_code for r in statuses[:3]] == [200, 200, 200]
        refused = [r for r in statuses if r.status_code == 429]
        assert len(refused) >= 4
        error = assert_error(refused[0], 429, "rate_limit_exceeded")
        assert error["type"] == "rate_limit_error"
        assert client.get("/v1/models", headers=bearer(other)).status_code == 200  # buckets are per key
        time.sleep(1.2)
        assert client.get("/v1/models", headers=bearer(slow)).status_code == 200  # the bucket refills


@pytest.mark.parametrize(
    "path,body",
    [
        ("/v1/completions", {"model": "tiny", "prompt": "x"}),
        ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}]}),
        ("/v1/generate", {"model": "tiny", "prompt": "x"}),
        ("/v1/evals", {"model": "tiny", "problems": "demo"}),
    ],
)
def test_generation_tokens_per_request_are_capped(service_settings, alice, path, body):
    with secure_client(service_settings, alice, max_generation_tokens=16) as client:
        response = client.post(path, json={**body, "max_tokens": 17})
    assert_error(response, 400, param="max_tokens")


# ------------------------------------------------------------------ path traversal


def _multipart(filename: bytes, content: bytes) -> tuple[bytes, str]:
    """A hand-built multipart body, so the file name reaches the server byte for byte."""
    boundary = "cuset" + secrets.token_hex(8)
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nfine-tune\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="'
        ).encode()
        + filename
        + (b'"\r\nContent-Type: application/octet-stream\r\n\r\n' + content + f"\r\n--{boundary}--\r\n".encode())
    )
    return body, f"multipart/form-data; boundary={boundary}"


@pytest.mark.parametrize(
    "filename",
    [b"../../etc/passwd", b"/etc/passwd", b"..\\..\\windows\\win.ini", b"ok\x00../../x.jsonl", b"..", b"/", b"\x00"],
)
def test_upload_names_cannot_leave_the_artifact_root(service_settings, database_url, alice, filename):
    body, content_type = _multipart(filename, GOOD_FILE)
    artifacts = service_settings.artifacts
    outside_before = {p for p in artifacts.parent.rglob("*") if not p.is_relative_to(artifacts)}
    with secure_client(service_settings, alice) as client:
        response = client.post("/v1/files", content=body, headers={"Content-Type": content_type})
        assert response.status_code == 200, response.text
        shown = response.json()["filename"]
        assert "/" not in shown and "\\" not in shown and "\x00" not in shown and shown not in ("", ".", "..")
        with session_scope(database_url) as session:
            row = session.get(File, response.json()["id"])
            stored = (artifacts / row.path).resolve()
        assert stored.is_file() and stored.is_relative_to(artifacts / "files")
        assert client.get(f"/v1/files/{row.id}/content").content == GOOD_FILE
    outside_after = {p for p in artifacts.parent.rglob("*") if not p.is_relative_to(artifacts)}
    assert outside_after == outside_before


@pytest.mark.parametrize(
    "file_id",
    [
        "..%2F..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fpasswd",
        "..",
        "...",
        "%00",
        "file-x%00..%2F..",
        "..%5C..%5Cetc%5Cpasswd",
    ],
)
def test_download_ids_cannot_reach_outside_files(api, alice, file_id):
    response = api.get(f"/v1/files/{file_id}/content", headers=bearer(alice))
    assert response.status_code in (404, 400), response.text
    assert "root:" not in response.text
    assert response.json()["error"]["code"] is not None


@pytest.mark.parametrize("stored", ["../../../../../../etc/passwd", "/etc/passwd", "files/../../../../etc/passwd"])
def test_a_tampered_row_never_serves_a_file_outside_the_root(service_settings, database_url, alice, stored):
    """A row whose path leaves the root (only a database compromise makes one) is refused by
    storage.stored_path: a server error in the error shape, never the file."""

    api = TestClient(create_app(service_settings.model_copy(update={"auth": True})), raise_server_exceptions=False)
    owner = _owner_of(database_url, alice)
    file_id = insert_file(database_url, owner=owner, filename="x.jsonl", path=stored, records=1, total_rows=1)
    try:
        for path in (f"/v1/files/{file_id}/content", f"/v1/files/{file_id}/records"):
            response = api.get(path, headers=bearer(alice))
            assert response.status_code >= 400 and "root:" not in response.text, (path, response.text[:200])
            assert set(response.json()["error"]) == {"message", "type", "param", "code"}
            assert "/etc/passwd" not in response.json()["error"]["message"]  # no server paths in answers
    finally:
        with session_scope(database_url) as session:
            session.delete(session.get(File, file_id))


# ------------------------------------------------------------------ the sandbox, end to end


SECRET_ENV = "CUSET_TEST_SECRET"
ADD_PROBLEM = (Path(__file__).resolve().parents[1] / "unit" / "cpu_cases" / "add_problem.py").read_text()


def hostile_answer(paths: list[str], ports: list[int]) -> str:
    """A kernel answer that passes the static checks; its module-level code probes the machine
    (files, environment, every process's environment, sockets) and reports what it got in an
    exception, which reaches the verification log the user reads."""
    return f'''```python
import os, socket, glob
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_got = []
for _p in {paths!r}:
    try:
        if os.path.isdir(_p):
            _got.append("LIST " + _p + " " + ",".join(os.listdir(_p)))
        else:
            _got.append("READ " + _p + " " + open(_p, errors="replace").read(200))
    except Exception as _e:
        _got.append("DENIED " + _p + " " + type(_e).__name__)
_got.append("ENV " + os.environ.get("{SECRET_ENV}", "absent"))
for _f in glob.glob("/proc/*/environ"):
    try:
        if b"{SECRET_ENV}" in open(_f, "rb").read():
            _got.append("PROCENV " + _f)
    except Exception:
        pass
for _host, _port in [("127.0.0.1", _p) for _p in {ports!r}] + [("1.1.1.1", 53), ("8.8.8.8", 443)]:
    try:
        socket.create_connection((_host, _port), timeout=2).close()
        _got.append("CONNECTED " + _host + ":" + str(_port))
    except Exception as _e:
        _got.append("NONET " + _host + ":" + str(_port) + " " + type(_e).__name__)
raise RuntimeError("PROBE-RESULTS " + " | ".join(_got))

cuda_src = r"""
#include <torch/extension.h>
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}}
torch::Tensor run(torch::Tensor a, torch::Tensor b) {{
    auto out = torch::empty_like(a);
    int n = a.numel();
    add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}}
"""
ext = load_inline(name="probe_ext", cpp_sources="torch::Tensor run(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=cuda_src, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.run(a, b)
```
'''


def _database_files() -> list[str]:
    """The shared Postgres's data folder and one of its files, when the server runs on this machine."""
    try:
        engine = create_engine(PG_ADMIN_URL)
        with engine.connect() as connection:
            folder = connection.execute(text("SHOW data_directory")).scalar()
        engine.dispose()
    except Exception:  # noqa: BLE001 - a remote or locked-down server: nothing local to probe
        return []
    return [folder, f"{folder}/PG_VERSION", f"{folder}/global/pg_control"]


@pytest.fixture(scope="module")
def probe(service_settings, tmp_path_factory, monkeypatch_module):
    """Run the hostile candidate through the worker's verify task, as /v1/generate does after
    decoding, in a worker of its own whose environment holds a secret. Returns (log, markers).

    The probe has a database of its own with no generation timeout: compiling the candidate's
    extension can outlast the run's 120 s timeout on a loaded machine, and the run's reaper
    would then fail the row while the verification is still going."""
    secret = f"secret-{secrets.token_hex(8)}"
    monkeypatch_module.setenv(SECRET_ENV, secret)
    marker = f"artifact-{secrets.token_hex(8)}"
    database_files = _database_files()
    with fresh_database() as database_url:
        settings = service_settings.model_copy(
            update={
                "broker_key_prefix": f"{service_settings.broker_key_prefix}sandbox:",
                "database_url": database_url,
                "generation_timeout_s": 24 * 3600,
            }
        )
        settings.artifacts.mkdir(parents=True, exist_ok=True)
        (settings.artifacts / "sandbox-marker.txt").write_text(marker)
        paths = [
            str(settings.artifacts),
            str(settings.artifacts / "sandbox-marker.txt"),
            str(settings.data_dir),
            *database_files,
        ]
        redis_port = int(settings.resolved_broker_url.rsplit(":", 1)[1].split("/")[0])
        pg_port = int(PG_ADMIN_URL.rsplit(":", 1)[1].split("/")[0])
        worker = WorkerProcess(settings, tmp_path_factory.mktemp("sandbox-worker"), queues="cpu", concurrency=1)
        worker.start()
        generation_id = insert_generation(
            database_url,
            {"problem": ADD_PROBLEM, "verify": "cpu", "n": 1},
            owner="probe",
            status="verifying",
            samples=[
                GenerationSample(index=0, text=hostile_answer(paths, [pg_port, redis_port]), finish_reason="stop")
            ],
        )
        try:
            from service.dispatch import send_verify_sample

            send_verify_sample(settings, generation_id, 0, gpu=False)

            def verified():
                with session_scope(database_url) as session:
                    row = session.get(Generation, generation_id)
                    if row.status == "failed":
                        pytest.fail(f"the hostile sample's generation failed: {row.error}\n{worker.log()[-3000:]}")
                    verification = load_samples(session, generation_id)[0].verification
                    return row.status == "succeeded" and verification and verification.model_dump(mode="json")

            verification = wait_for(verified, timeout=900, interval=1, what="the hostile sample's verification")
            assert worker.process.poll() is None, "the worker died verifying a hostile candidate"
        finally:
            worker.stop()
    report = json.dumps(verification)
    # The log ends with the exception's full message (the reason holds a shortened copy).
    tail = report.rsplit("PROBE-RESULTS", 1)[-1].split('"', 1)[0].split("\\n", 1)[0]
    results = [item.strip() for item in tail.split(" | ")]
    print("\nsandbox probe results:", results)
    return {
        "verification": verification,
        "report": report,
        "results": results,
        "secret": secret,
        "marker": marker,
        "service_folders": [str(settings.artifacts), str(settings.data_dir)],
        "database_files": database_files,
    }


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.mark.slow
def test_hostile_candidate_ran_and_was_judged_a_runtime_error(probe):
    assert "PROBE-RESULTS" in probe["report"], probe["report"][:2000]
    assert probe["verification"]["verdict"] == "runtime_error"


@pytest.mark.slow
def test_hostile_candidate_sees_no_environment_secret(probe):
    assert probe["secret"] not in probe["report"]
    assert "ENV absent" in probe["report"] and "PROCENV" not in probe["report"]


@pytest.mark.slow
def test_hostile_candidate_has_no_network(probe):
    assert "CONNECTED" not in probe["report"]
    assert sum(r.startswith("NONET ") for r in probe["results"]) == 4, probe["results"]


@pytest.mark.slow
def test_hostile_candidate_cannot_read_the_database_files(probe):
    if not probe["database_files"]:
        pytest.skip("the test Postgres does not run on this machine: no database files to probe")
    for path in probe["database_files"]:
        assert any(r.startswith(f"DENIED {path} ") for r in probe["results"]), (path, probe["results"])


@pytest.mark.slow
def test_hostile_candidate_cannot_read_the_artifact_root(probe):
    assert probe["marker"] not in probe["report"]
    for folder in probe["service_folders"]:
        listing = [r for r in probe["results"] if r.startswith(f"LIST {folder} ")]
        # Denied, or an empty folder standing in for it: never the service's own files.
        assert all(r.strip() == f"LIST {folder}" for r in listing), listing


@pytest.mark.slow
def test_service_stays_up_after_the_hostile_candidate(probe, api):
    assert api.get("/readyz").status_code == 200
