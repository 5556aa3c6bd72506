"""The states of the service's rows, and which of them are final.

Statuses are stored and sent as their plain string values (``JobStatus.RUNNING == "running"``),
so rows, API answers and the dashboard's JSON read the same as plain strings would; comparing
a row's ``status`` with a member, or looking it up in a set of members, works on either.

A job moves ``validating_files -> queued -> running`` and ends ``succeeded``, ``failed`` or
``cancelled`` (a running job that lost its worker may go back to ``queued``); service/jobs.py
holds every write that moves it. A generation moves ``queued -> running [-> verifying]`` and
ends ``succeeded`` or ``failed``; its ``kind`` is a ``GenerationKind``. An eval moves
``queued -> running`` and ends ``succeeded``, ``failed`` or ``cancelled``. Verdicts of verified kernels are ``cuset_core.verify.result.Verdict``.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """A fine-tuning job's status, as OpenAI names them."""

    VALIDATING_FILES = "validating_files"
    QUEUED = "queued"
    RUNNING = "running"
    # Shown, never stored: a running job whose cancel was asked for (its row is ``running`` with
    # ``cancel_requested`` until its worker stops it and writes ``cancelled``).
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


JOB_NOT_STARTED = frozenset({JobStatus.VALIDATING_FILES, JobStatus.QUEUED})
JOB_ACTIVE = JOB_NOT_STARTED | {JobStatus.RUNNING, JobStatus.CANCELLING}  # counted against max_concurrent_jobs
JOB_FINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


class GenerationStatus(StrEnum):
    """An inference request's status (``verifying``: decoded, samples being verified)."""

    QUEUED = "queued"
    RUNNING = "running"
    VERIFYING = "verifying"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


GENERATION_FINAL = frozenset({GenerationStatus.SUCCEEDED, GenerationStatus.FAILED})


class GenerationKind(StrEnum):
    """What a generation row answers: ``/v1/generate`` (kernels, verified when asked), a
    completion, a chat completion, or a token-confidence pass over a stored record."""

    GENERATE = "generate"
    COMPLETION = "completion"
    CHAT = "chat"
    CONFIDENCE = "confidence"


class EvalStatus(StrEnum):
    """An evaluation's status."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


EVAL_FINAL = frozenset({EvalStatus.SUCCEEDED, EvalStatus.FAILED, EvalStatus.CANCELLED})
