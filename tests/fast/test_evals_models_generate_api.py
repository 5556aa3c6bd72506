"""``/v1/evals``, ``/v1/models`` and ``/v1/generate``'s request checks through ``create_app`` on the
embedded SQLite database, without a worker: what the API decides before anything is decoded."""

from __future__ import annotations

import json

import pytest

from cuset_core.demo import demo_problems
from db.models import Generation
from db.session import session_scope
from tests.integration.job_support import insert_eval, insert_tuned_model, upload_demo_dataset, upload_eval_problems
from tests.sqlite_service import FAST_OWNER, OTHER_OWNER, api_client, enqueued

EVAL = {"model": "tiny", "samples": 0, "max_tokens": 32, "tier": "static", "problems": "demo:held-out"}
PROBLEM = demo_problems()[0]


def generation_rows(settings) -> int:
    with session_scope(settings.resolved_database_url) as session:
        return session.query(Generation).count()


# ------------------------------------------------------------------ evals


def test_a_created_eval_is_queued_with_its_problem_count_and_its_message(fast_client, fast_settings):
    response = fast_client.post("/v1/evals", json=EVAL)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["status"], body["model"], body["problems"]) == ("queued", "tiny", "demo:held-out")
    assert body["progress"]["done"] == 0 and body["progress"]["total"] > 0
    assert (body["config"]["tier"], body["config"]["max_new_tokens"]) == ("static", 32)
    assert enqueued(fast_settings) == [("cuset.eval", [body["id"]])]
    assert body["config"]["repair_rounds"] == 0


def test_an_eval_with_repair_rounds_records_them_in_its_config(fast_client):
    response = fast_client.post("/v1/evals", json=EVAL | {"repair_rounds": 2})
    assert response.status_code == 200, response.text
    assert response.json()["config"]["repair_rounds"] == 2


@pytest.mark.parametrize(
    ("change", "status", "param"),
    [
        ({"tier": "quantum"}, 400, "tier"),
        ({"samples": -1}, 400, "samples"),
        ({"greedy": False, "samples": 0}, 400, "samples"),
        ({"samples": 2, "k": [1, 4]}, 400, "k"),
        ({"samples": 10_000}, 400, "samples"),
        ({"max_tokens": 10**9}, 400, "max_tokens"),
        ({"temperature": -1}, 400, "temperature"),
        ({"model": "no-such-model"}, 404, "model"),
        ({"problems": "everything"}, 400, "problems"),
        ({"problems": None}, 400, "eval_file"),
        ({"eval_file": "file-unknown"}, 400, "problems"),
        ({"colour": "blue"}, 400, "colour"),
        ({"tolerance_profile": "loose"}, 400, "tolerance_profile"),
        ({"atol": -1}, 400, "atol"),
        ({"rtol": "Infinity"}, 400, "rtol"),
        ({"input_seed": 2**40}, 400, "input_seed"),
        ({"trials": 0}, 400, "trials"),
        ({"arch": "90"}, 400, "arch"),
        ({"repair_rounds": -1}, 400, "repair_rounds"),
        ({"repair_rounds": 11}, 400, "repair_rounds"),
        ({"repair_rounds": "twice"}, 400, "repair_rounds"),
        ({"repair_rounds": 5}, 400, "repair_rounds"),  # above the service's max_repair_rounds (4)
    ],
)
def test_a_bad_eval_request_names_its_field_and_creates_nothing(fast_client, fast_settings, change, status, param):
    response = fast_client.post("/v1/evals", json=EVAL | change)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"]
    assert fast_client.get("/v1/evals").json()["data"] == [] and enqueued(fast_settings) == []


def test_an_eval_file_must_be_an_eval_purpose_jsonl_file(fast_client):
    training = upload_demo_dataset(fast_client)
    response = fast_client.post("/v1/evals", json={**EVAL, "problems": None, "eval_file": training})
    assert response.status_code == 400
    assert (response.json()["error"]["param"], response.json()["error"]["code"]) == (
        "eval_file",
        "invalid_file_purpose",
    )
    problems = upload_eval_problems(fast_client)
    created = fast_client.post("/v1/evals", json={**EVAL, "problems": None, "eval_file": problems}).json()
    assert (created["eval_file"], created["progress"]["total"]) == (problems, 2)


def test_evals_cancel_and_list_newest_first_by_cursor(fast_client):
    ids = [fast_client.post("/v1/evals", json=EVAL).json()["id"] for _ in range(3)]
    cancelled = fast_client.post(f"/v1/evals/{ids[0]}/cancel").json()
    assert cancelled["status"] == "cancelled" and cancelled["finished_at"] is not None
    assert fast_client.post(f"/v1/evals/{ids[0]}/cancel").json()["status"] == "cancelled"  # a no-op
    first = fast_client.get("/v1/evals", params={"limit": 2}).json()
    assert ([e["id"] for e in first["data"]], first["has_more"]) == ([ids[2], ids[1]], True)
    second = fast_client.get("/v1/evals", params={"limit": 2, "after": first["last_id"]}).json()
    assert ([e["id"] for e in second["data"]], second["has_more"]) == ([ids[0]], False)


def test_another_owners_eval_is_a_404_like_an_unknown_one(fast_client, fast_settings):
    insert_eval(fast_settings.resolved_database_url, "eval-theirs", owner=OTHER_OWNER)
    for eval_id in ("eval-unknown", "eval-theirs"):
        for method, suffix in (("GET", ""), ("GET", "/problems"), ("POST", "/cancel")):
            response = fast_client.request(method, f"/v1/evals/{eval_id}{suffix}")
            assert response.status_code == 404, (method, suffix)
            assert response.json()["error"]["code"] == "eval_not_found"


# ------------------------------------------------------------------ models


def test_models_list_every_base_model_with_its_source(fast_settings, tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    base_models = {
        "tiny": fast_settings.base_models["tiny"],
        "bundled": "smollm2-135m",
        "file": str(gguf),
        "hub": "org/coder",
        "gone": str(tmp_path / "gone"),
    }
    with api_client(fast_settings.model_copy(update={"base_models": base_models})) as client:
        listing = client.get("/v1/models").json()
        one = client.get("/v1/models/file").json()
    assert [(m["id"], m["owned_by"], m["source"]) for m in listing["data"]] == [
        ("tiny", "cuset", "folder"),
        ("bundled", "cuset", "bundled"),
        ("file", "cuset", "gguf"),
        ("hub", "cuset", "hub"),
        ("gone", "cuset", None),
    ]
    assert one == {"id": "file", "object": "model", "created": 0, "owned_by": "cuset", "source": "gguf"}


def _tuned(settings, name: str, owner: str) -> None:
    """A succeeded job of ``owner`` whose fine-tuned model is ``ft:tiny:<name>``."""
    insert_tuned_model(settings.resolved_database_url, name, f"adapters/{name}", owner)


def test_an_owners_tuned_models_are_listed_for_that_owner_only(fast_client, fast_settings):
    _tuned(fast_settings, "mine", FAST_OWNER)
    _tuned(fast_settings, "theirs", OTHER_OWNER)
    listed = {m["id"]: m for m in fast_client.get("/v1/models").json()["data"]}
    assert set(listed) == {"tiny", "ft:tiny:mine"}
    assert (listed["ft:tiny:mine"]["owned_by"], listed["ft:tiny:mine"]["source"]) == (FAST_OWNER, "adapter")
    theirs = fast_client.get("/v1/models/ft:tiny:theirs")
    assert theirs.status_code == 404 and theirs.json()["error"]["param"] == "model"


def test_shipped_adapters_present_are_served_by_name_to_every_owner(fast_settings, tmp_path, monkeypatch):
    import cuset_core.adapters as adapters
    from db.model_specs import model_spec_for

    root = tmp_path / "adapters"
    for name in adapters.SHIPPED:
        (root / name).mkdir(parents=True)
        for file in adapters.SHIPPED_FILES:
            (root / name / file).write_text("{}")
    monkeypatch.setattr(adapters, "ADAPTERS_ROOT", root)
    served = fast_settings.model_copy(update={"shipped_adapters": True})
    with api_client(served) as client:
        listed = [(m["id"], m["owned_by"], m["source"]) for m in client.get("/v1/models").json()["data"]]
        one = client.get("/v1/models/cuset-ew-135m").json()
    assert listed == [("tiny", "cuset", "folder"), ("cuset-ew-135m", "cuset", "adapter")]
    assert (one["id"], one["source"]) == ("cuset-ew-135m", "adapter")
    with session_scope(served.resolved_database_url) as session:
        assert model_spec_for(session, served, OTHER_OWNER, "cuset-ew-135m") == "cuset-ew-135m"
        assert model_spec_for(session, fast_settings, OTHER_OWNER, "cuset-ew-135m") is None  # turned off


# ------------------------------------------------------------------ /v1/generate request checks


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"max_tokens": 10**6}, "max_tokens"),
        ({"n": 10**3}, "n"),
        ({"best_of": 2}, "best_of"),  # a search needs verification
        ({"stop_at_first_pass": True}, "stop_at_first_pass"),
        ({"repair_rounds": 1}, "repair_rounds"),
        ({"verify": "static", "best_of": 10**3}, "best_of"),
        ({"verify": "static", "best_of": 2, "n": 2}, "best_of"),
        ({"verify": "static", "repair_rounds": 99}, "repair_rounds"),
    ],
)
def test_a_generate_request_the_server_cannot_honour_is_a_400_naming_the_field(fast_client, fast_settings, body, param):
    response = fast_client.post("/v1/generate", json={"model": "tiny", "problem": PROBLEM.problem_code} | body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["type"]) == (param, "invalid_request_error") and param in error["message"]
    assert generation_rows(fast_settings) == 0 and enqueued(fast_settings) == []


@pytest.mark.parametrize("body", [{"best_of": 0}, {"repair_rounds": -1}, {"n": 0}, {"verify": "maybe"}])
def test_a_generate_setting_out_of_range_is_a_400_naming_the_field(fast_client, fast_settings, body):
    response = fast_client.post("/v1/generate", json={"model": "tiny", "problem": PROBLEM.problem_code} | body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == next(iter(body))
    assert generation_rows(fast_settings) == 0


def test_verification_without_a_problem_is_a_400_naming_verify(fast_client):
    response = fast_client.post("/v1/generate", json={"model": "tiny", "prompt": "hi", "verify": "static"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "verify"


@pytest.mark.parametrize(
    ("problem", "says"),
    [("print('hello')", "no top-level `class Model`"), ("class Model(:\n    pass\n", "line 1: not valid Python")],
)
def test_a_problem_that_is_not_a_kernelbench_problem_is_a_400_naming_what_it_lacks(
    fast_client, fast_settings, problem, says
):
    response = fast_client.post("/v1/generate", json={"model": "tiny", "problem": problem, "verify": "none"})
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == "problem", error
    assert says in error["message"] and "send free text as prompt" in error["message"]
    assert generation_rows(fast_settings) == 0


def test_a_body_that_is_not_json_is_a_400_about_the_body_not_a_field(fast_client):
    response = fast_client.post(
        "/v1/generate", content=b'{"model": "tiny", "prompt": }', headers={"Content-Type": "application/json"}
    )
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] is None, error
    assert error["message"] == "body: not valid JSON at character 28: Expecting value", error


def test_generating_with_an_unknown_model_is_a_404_naming_model(fast_client, fast_settings):
    response = fast_client.post("/v1/generate", json={"model": "no-such-model", "prompt": "hi"})
    assert response.status_code == 404
    assert (response.json()["error"]["param"], response.json()["error"]["code"]) == ("model", "model_not_found")
    assert generation_rows(fast_settings) == 0


def test_an_unknown_route_answers_in_the_error_shape(fast_client):
    response = fast_client.get("/v1/nothing-here")
    assert response.status_code == 404
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def level_archive(files: dict[str, str]) -> bytes:
    """A gzipped tar of a KernelBench-style level folder holding ``files`` by name."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            member = tarfile.TarInfo(f"level1/{name}")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def test_a_kernelbench_level_folder_uploaded_as_a_tar_is_an_eval_set_that_can_be_narrowed(fast_client):
    codes = {p.id: p.problem_code for p in demo_problems()}
    level = {
        "10_ReLU.py": codes["02_relu"],
        "2_Sigmoid.py": codes["06_sigmoid"],
        "1_Vector_add.py": codes["01_vector_add"],
        "__init__.py": "",
        "README.md": "not a problem",
    }
    uploaded = fast_client.post(
        "/v1/files", files={"file": ("level1.tar.gz", level_archive(level))}, data={"purpose": "eval"}
    )
    assert uploaded.status_code == 200, uploaded.text
    assert (uploaded.json()["records"], uploaded.json()["purpose"]) == (3, "eval")
    file_id = uploaded.json()["id"]
    rows = [json.loads(line) for line in fast_client.get(f"/v1/files/{file_id}/content").text.splitlines()]
    assert [row["id"] for row in rows] == ["1_Vector_add", "2_Sigmoid", "10_ReLU"]  # KernelBench's order
    assert rows[2]["problem"] == codes["02_relu"]
    whole = fast_client.post("/v1/evals", json={**EVAL, "problems": None, "eval_file": file_id}).json()
    assert whole["progress"]["total"] == 3
    narrowed = fast_client.post(
        "/v1/evals", json={**EVAL, "problems": None, "eval_file": file_id, "problem_ids": "1-2,10_ReLU"}
    ).json()
    assert (narrowed["progress"]["total"], narrowed["config"]["problem_ids"]) == (3, "1-2,10_ReLU")
    first = fast_client.post(
        "/v1/evals", json={**EVAL, "problems": None, "eval_file": file_id, "problem_ids": "1"}
    ).json()
    assert first["progress"]["total"] == 1
    unknown = fast_client.post(
        "/v1/evals", json={**EVAL, "problems": None, "eval_file": file_id, "problem_ids": "7,23_Softmax"}
    )
    assert unknown.status_code == 400
    assert unknown.json()["error"]["param"] == "problem_ids"
    assert "23_Softmax" in unknown.json()["error"]["message"]


def test_an_archive_with_a_file_that_is_no_problem_is_rejected_naming_it(fast_client):
    broken = level_archive({"1_Vector_add.py": PROBLEM.problem_code, "3_Broken.py": "import torch\n"})
    rejected = fast_client.post("/v1/files", files={"file": ("level1.tar", broken)}, data={"purpose": "eval"})
    assert rejected.status_code == 400
    assert "3_Broken" in rejected.json()["error"]["message"]
    as_training = fast_client.post(
        "/v1/files",
        files={"file": ("level1.tar", level_archive({"1_Vector_add.py": PROBLEM.problem_code}))},
        data={"purpose": "fine-tune"},
    )
    assert as_training.status_code == 400
    assert "unknown_format" in as_training.json()["error"]["message"]
