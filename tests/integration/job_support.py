"""Helpers the job tests share: upload the demo dataset, build a small CuSeT job request, read a
job's state from the API or straight from its rows (``stored_row``, ``event_rows``), and insert
rows as they are (``insert_file``, ``insert_job``, ``insert_tuned_model``, ``insert_generation``,
``decoded_generation``: states the API would take long to reach), on the real service's Postgres
or a fast test's SQLite alike."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import select

from cuset_core.demo import demo_problems, write_demo_dataset
from cuset_core.generation.prompts import build_messages
from cuset_core.training.config import JobSpec
from db.generation_rows import load_samples, save_samples
from db.generations import GenerationRequest, GenerationSample
from db.ids import new_id
from db.models import Eval, File, Generation, Job, JobEvent
from db.session import session_scope
from tests.real_service import TEST_OWNER

# Long enough for the demo answers (most are 600-1000 tokens), short enough to train in seconds.
MAX_SEQ_LEN = 1024
FINISHED = {"succeeded", "failed", "cancelled"}


def demo_dataset_bytes() -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "demo.jsonl"
        write_demo_dataset(path)
        return path.read_bytes()


_SHORT_PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * {c}


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
"""
_SHORT_ANSWER = """```python
import torch
from torch.utils.cpp_extension import load_inline

source = \"\"\"
__global__ void scale(const float* x, float* y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * {c}f;
}}
torch::Tensor run(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    int n = x.numel();
    scale<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}}
\"\"\"
ext = load_inline("scale", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=source, functions=["run"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.run(x)
```"""


def short_dataset_bytes() -> bytes:
    """Eight valid fine-tune records of about 380 tokens each (a scale by a constant and its
    kernel): the tiny model's optimizer steps cost a third of the demo dataset's (600-1000 tokens),
    for the tests that need a job to train, not the demo's content."""
    constants = ("2.0", "0.5", "3.0", "1.5", "4.0", "0.25", "2.5", "0.75")
    rows = [
        {
            "messages": [
                *build_messages(_SHORT_PROBLEM.format(c=c), "compact"),
                {"role": "assistant", "content": _SHORT_ANSWER.format(c=c)},
            ]
        }
        for c in constants
    ]
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def upload_short_dataset(client) -> str:
    """Upload ``short_dataset_bytes`` (purpose fine-tune); returns its id."""
    response = client.post(
        "/v1/files", files={"file": ("short.jsonl", short_dataset_bytes())}, data={"purpose": "fine-tune"}
    )
    assert response.status_code == 200, response.text
    return response.json()["id"]


def upload_demo_dataset(client) -> str:
    """Upload the demo dataset with ``POST /v1/files`` (purpose fine-tune); returns its id."""
    response = client.post(
        "/v1/files", files={"file": ("demo.jsonl", demo_dataset_bytes())}, data={"purpose": "fine-tune"}
    )
    assert response.status_code == 200, response.text
    return response.json()["id"]


def upload_eval_problems(client) -> str:
    rows = [{"id": p.id, "problem": p.problem_code} for p in demo_problems()[:2]]
    content = b"".join(json.dumps(row).encode() + b"\n" for row in rows)
    response = client.post("/v1/files", files={"file": ("problems.jsonl", content)}, data={"purpose": "eval"})
    assert response.status_code == 200, response.text
    return response.json()["id"]


def upload_problems(client, codes: dict[str, str]) -> str:
    """A problems file (purpose problems, rows ``{"id", "problem"}``) of ``codes`` by id; its id."""
    content = b"".join(json.dumps({"id": pid, "problem": code}).encode() + b"\n" for pid, code in codes.items())
    response = client.post("/v1/files", files={"file": ("pool.jsonl", content)}, data={"purpose": "problems"})
    assert response.status_code == 200, response.text
    return response.json()["id"]


def job_request(training_file: str, *, max_steps: int = 8, **extra) -> dict:
    """A CuSeT job on the tiny base model: batch 2, a checkpoint every 2 steps."""
    return {
        "model": "tiny",
        "training_file": training_file,
        "method": {"type": "cuset"},
        "hyperparameters": {"max_steps": max_steps, "batch_size": 2, "save_steps": 2, "max_seq_len": MAX_SEQ_LEN},
        **extra,
    }


def job_state(client, job_id: str) -> dict:
    response = client.get(f"/v1/fine_tuning/jobs/{job_id}")
    assert response.status_code == 200, response.text
    return response.json()


def event_messages(client, job_id: str) -> list[str]:
    """Every event message of a job, oldest first."""
    return [
        e["message"]
        for e in reversed(client.get(f"/v1/fine_tuning/jobs/{job_id}/events", params={"limit": 100}).json()["data"])
    ]


def stored_row(database_url: str, model: type, row_id: str):
    """The ``model`` row ``row_id`` as the database holds it now, detached from its session."""
    with session_scope(database_url) as session:
        row = session.get(model, row_id)
        session.expunge(row)
        return row


def event_rows(database_url: str, job_id: str) -> list[tuple[str, str]]:
    """(level, message) of every event of a job, oldest first, read from its rows."""
    with session_scope(database_url) as session:
        rows = session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.seq))
        return [(row.level, row.message) for row in rows]


def insert_job(database_url: str, training_file: str, **columns) -> str:
    """A Job row of ``TEST_OWNER`` on ``training_file`` (model "tiny", the default spec: method
    cuset; status queued),
    with ``columns`` over those defaults; its id."""
    job_id = columns.pop("id", None) or new_id("ftjob")
    defaults = {"owner": TEST_OWNER, "model": "tiny", "spec": JobSpec()}
    with session_scope(database_url) as session:
        session.add(Job(**(defaults | {"id": job_id, "training_file": training_file} | columns)))
    return job_id


def insert_file(database_url: str, file_id: str | None = None, **columns) -> str:
    """A File row of ``TEST_OWNER`` (a one-byte fine-tune JSONL ``train.jsonl``, nothing stored
    at its path), with ``columns`` over those defaults; its id."""
    file_id = file_id or new_id("file")
    defaults = {"owner": TEST_OWNER, "filename": "train.jsonl", "purpose": "fine-tune", "format": "jsonl"}
    with session_scope(database_url) as session:
        session.add(File(**(defaults | {"bytes": 1, "path": "x", "id": file_id} | columns)))
    return file_id


def insert_tuned_model(database_url: str, name: str, output_dir: str, owner: str = TEST_OWNER) -> str:
    """A succeeded job of ``owner`` (and its training File row) whose fine-tuned model is
    ``ft:tiny:<name>`` with its adapter in ``output_dir`` (under the artifact root); that model id."""
    insert_file(database_url, f"file-{name}", owner=owner)
    now = time.time()
    model = f"ft:tiny:{name}"
    insert_job(
        database_url,
        f"file-{name}",
        id=f"ftjob-{name}",
        owner=owner,
        status="succeeded",
        fine_tuned_model=model,
        output_dir=output_dir,
        created_at=now,
        finished_at=now,
    )
    return model


def insert_eval(database_url: str, eval_id: str | None = None, **columns) -> str:
    """An Eval row of ``TEST_OWNER`` (model "tiny" on the demo problems, default config, status
    queued), with ``columns`` over those defaults; its id."""
    eval_id = eval_id or new_id("eval")
    defaults = {"owner": TEST_OWNER, "model": "tiny", "problems": "demo", "config": {}}
    with session_scope(database_url) as session:
        session.add(Eval(**(defaults | {"id": eval_id} | columns)))
    return eval_id


def insert_scored_eval(
    database_url: str,
    eval_id: str,
    problems: list[str],
    passes: set[str],
    *,
    owner: str = TEST_OWNER,
    status: str = "succeeded",
) -> str:
    """A finished eval (tier cpu, k 1 and 2) of ``problems``: per problem a greedy answer and 2
    samples, all passing on the problems in ``passes`` and none elsewhere; its id."""
    from cuset_core.evaluation.metrics import Aggregate, problem_row
    from cuset_core.verify.result import Tier, Verdict, VerifyResult
    from db.evals import EvalSampleRecord
    from db.models import EvalProblem

    def sample(index: int, passed: bool) -> EvalSampleRecord:
        verdict = Verdict.PASS if passed else Verdict.VALUE_MISMATCH
        tiers = {Tier.STATIC: Verdict.PASS, Tier.COMPILE: Verdict.PASS, Tier.CPU: verdict}
        result = VerifyResult(verdict=verdict, tier=Tier.CPU, tier_verdicts=tiers)
        return EvalSampleRecord(index=index, greedy=index == 0, answer="x", code="x", result=result)

    insert_eval(
        database_url, eval_id, owner=owner, status=status, config={"tier": "cpu", "samples": 2},
        aggregate=Aggregate(problems=len(problems), samples=3 * len(problems), tier=Tier.CPU, k_values=[1, 2]),
        finished_at=time.time(),
    )  # fmt: skip
    with session_scope(database_url) as session:
        for pid in problems:
            samples = [sample(index, pid in passes) for index in range(3)]
            results = [s.result for s in samples]
            row = problem_row(pid, results[1:], results[0])
            session.add(EvalProblem(eval_id=eval_id, problem_id=pid, code="", row=row, samples=samples))
    return eval_id


def insert_generation(database_url: str, request: dict, *, samples: Sequence[GenerationSample] = (), **columns) -> str:
    """A /v1/generate Generation row of ``TEST_OWNER`` with this ``request`` JSON (model "tiny",
    status queued, no samples unless given), with ``columns`` over those defaults; its id."""
    generation_id = columns.pop("id", None) or new_id("gen")
    defaults = {"owner": TEST_OWNER, "model": "tiny", "kind": "generate", "status": "queued"}
    with session_scope(database_url) as session:
        session.add(Generation(**(defaults | {"id": generation_id, "request": request} | columns)))
        session.flush()
        save_samples(session, generation_id, list(samples))
    return generation_id


def stored_samples(database_url: str, generation_id: str) -> list[GenerationSample]:
    """The attempts of a generation as stored now."""
    with session_scope(database_url) as session:
        return load_samples(session, generation_id)


def decoded_generation(
    database_url: str,
    spec: str,
    answers: list[str],
    *,
    stop_at_first_pass: bool,
    repair_rounds: int = 0,
    verify: str = "static",
    **columns,
) -> str:
    """A /v1/generate row over the first demo problem whose drawn attempts are ``answers``,
    decoded and waiting for the ``verify`` tier; its id."""
    problem = demo_problems()[0].problem_code
    request = GenerationRequest(
        spec=spec,
        prompts=[build_messages(problem, "compact")],
        n=len(answers),
        verify=verify,
        problem=problem,
        stop_at_first_pass=stop_at_first_pass,
        repair_rounds=repair_rounds,
    )
    samples = [GenerationSample(index=i, text=text, finish_reason="stop", code=text) for i, text in enumerate(answers)]
    return insert_generation(
        database_url,
        request.model_dump(mode="json"),
        status="verifying",
        samples=samples,
        **columns,
    )
