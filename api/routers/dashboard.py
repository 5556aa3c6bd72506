"""The dashboard: server-rendered pages that read everything from the ``/v1`` JSON API in the
browser, so the dashboard is a plain API client (the same calls a user's script makes).

The server only renders page shells with the ids from the URL; the only data it serves itself
is the bundled demo set (the playground's problems and the Files page's one-click demo upload),
which is package data, not database rows. Static files (the page scripts, the stylesheet, vendored libraries) are served under
``/static``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from cuset_core.demo import HELD_OUT, demo_problems, demo_record
from db.statuses import EVAL_FINAL, JOB_ACTIVE, EvalStatus, JobStatus

_HERE = Path(__file__).resolve().parent.parent
templates = Jinja2Templates(directory=_HERE / "templates")
router = APIRouter(include_in_schema=False)


def mount_static(app: FastAPI) -> None:
    """Serve the dashboard's scripts, stylesheet and vendored libraries under ``/static``."""
    app.mount("/static", StaticFiles(directory=_HERE / "static"), name="static")


@lru_cache(maxsize=1)
def _demo_choices() -> list[dict]:
    """The demo problems the playground offers: id, family, reference code; held-out ones first
    (the model has not been trained on them)."""
    problems = [
        {"id": p.id, "category": p.category, "held_out": p.id in HELD_OUT, "code": p.problem_code}
        for p in demo_problems()
    ]
    return sorted(problems, key=lambda p: (not p["held_out"], p["id"]))


# Every job status (the jobs page's filter) and the unfinished ones the page scripts poll for
# (api/static/js/api.js reads them).
STATUSES = {
    "job": list(JobStatus),
    "job_active": sorted(JOB_ACTIVE),
    "eval_active": sorted(set(EvalStatus) - EVAL_FINAL),
}


def _page(request: Request, template: str, active: str, **context) -> HTMLResponse:
    return templates.TemplateResponse(request, template, {"active": active, "statuses": STATUSES, **context})


@router.get("/", response_class=HTMLResponse)
def jobs_page(request: Request) -> HTMLResponse:
    """All fine-tuning jobs with their progress."""
    return _page(request, "jobs.html", "jobs")


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: str) -> HTMLResponse:
    """One job: status, curves, events, checkpoints and the resulting model."""
    return _page(request, "job.html", "jobs", job_id=job_id)


@router.get("/files", response_class=HTMLResponse)
def files_page(request: Request) -> HTMLResponse:
    """Uploaded datasets."""
    return _page(request, "files.html", "files")


@router.get("/files/{file_id}", response_class=HTMLResponse)
def file_page(request: Request, file_id: str) -> HTMLResponse:
    """One dataset's records with their validation warnings."""
    return _page(request, "file.html", "files", file_id=file_id)


@router.get("/files/{file_id}/records/{n}", response_class=HTMLResponse)
def record_page(request: Request, file_id: str, n: int) -> HTMLResponse:
    """The kernel view: one record's answer with its CUDA-sensitive regions and confidence."""
    return _page(request, "record.html", "files", file_id=file_id, n=n)


@router.get("/evals", response_class=HTMLResponse)
def evals_page(request: Request) -> HTMLResponse:
    """Evaluations of models over problem sets."""
    return _page(request, "evals.html", "evals")


@router.get("/evals/compare", response_class=HTMLResponse)
def eval_compare_page(request: Request) -> HTMLResponse:
    """Two evaluations of the same problems side by side (``?a=&b=``), with paired intervals."""
    return _page(request, "eval_compare.html", "evals")


@router.get("/evals/{eval_id}", response_class=HTMLResponse)
def eval_page(request: Request, eval_id: str) -> HTMLResponse:
    """One evaluation: aggregate metrics, failures by verdict, per-problem results."""
    return _page(request, "eval.html", "evals", eval_id=eval_id)


@router.get("/dashboard/demo-dataset.jsonl", response_class=PlainTextResponse)
def demo_dataset() -> PlainTextResponse:
    """The bundled demo training set (held-out problems left out) as JSONL, for the Files page's
    one-click upload; the browser posts it to ``/v1/files`` like any other dataset."""
    lines = (json.dumps(demo_record(p)) for p in demo_problems() if p.id not in HELD_OUT)
    return PlainTextResponse("\n".join(lines) + "\n", media_type="application/jsonl")


@router.get("/playground", response_class=HTMLResponse)
def playground_page(request: Request) -> HTMLResponse:
    """Generate kernels from a model and watch them stream and get verified."""
    return _page(request, "playground.html", "playground", demo_problems=_demo_choices())
