"""``cuset.validate_job_files`` (cpu queue): check a new job's data files with cuset_core before
it waits for a GPU. Records over the token limit are warnings; a file with no usable record
fails the job."""

from __future__ import annotations

import logging
from typing import Literal

from celery import shared_task

from cuset_core.data import DataFileError, LoadOptions, load_records
from cuset_core.models import load_tokenizer
from db.errors import ErrorCode, ErrorInfo
from db.models import File, Job
from db.session import session_scope
from db.statuses import JobStatus
from service.dispatch import TaskName, send_tune
from service.jobs import finish_validation, model_spec
from worker.runtime import RuntimeTask

log = logging.getLogger(__name__)


def _check_file(
    file: File, settings, tokenizer, options: LoadOptions, param: str
) -> tuple[list[tuple[Literal["info", "warning"], str]], ErrorInfo | None]:
    """((level, message) notes, the error or None) for one data file, loaded as training will load
    it (the job's prompt style and token limit)."""
    max_seq_len = options.max_tokens
    try:
        loaded = load_records(settings.artifacts / file.path, options, tokenizer)
    except DataFileError as exc:
        return [], ErrorInfo(code=ErrorCode.INVALID_FILE, message=f"{param} {file.id}: {exc}", param=param)
    notes = loaded.summary(param)
    if not loaded.records:
        first = f"; first: {loaded.errors[0]}" if loaded.errors else ""
        return notes[:-1], ErrorInfo(
            code=ErrorCode.INVALID_FILE,
            param=param,
            message=f"{param} {file.id}: no usable record among {loaded.total} (max_seq_len {max_seq_len}{first})",
        )
    return notes, None


@shared_task(name=TaskName.VALIDATE_JOB_FILES, base=RuntimeTask, bind=True)
def validate_job_files(self: RuntimeTask, job_id: str) -> None:
    """Move a ``validating_files`` job to ``queued`` (and enqueue training) or to ``failed``."""
    settings = self.runtime.settings
    url = settings.resolved_database_url
    with session_scope(url) as session:
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.VALIDATING_FILES:
            return  # redelivered, or cancelled meanwhile
        files = [(session.get_one(File, job.training_file), "training_file")]
        if job.validation_file:
            files.append((session.get_one(File, job.validation_file), "validation_file"))
        options = LoadOptions(prompt_style=job.spec.prompt_style, max_tokens=job.spec.hyperparameters.max_seq_len)
        notes: list[tuple[str, str]] = []
        error = None
        try:
            tokenizer = load_tokenizer(model_spec(session, settings, job))
            for file, param in files:
                file_notes, error = _check_file(file, settings, tokenizer, options, param)
                notes += file_notes
                if error:
                    break
        except Exception as exc:  # noqa: BLE001 - any failure to check is the job's failure, said in words
            log.exception("validating job %s", job_id)
            error = ErrorInfo(code=ErrorCode.VALIDATION_ERROR, message=f"{type(exc).__name__}: {exc}")
        if not finish_validation(session, job_id, notes, error):
            return
    if not error:
        send_tune(settings, job_id)
