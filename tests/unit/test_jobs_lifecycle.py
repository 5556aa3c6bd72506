"""How a job's status moves (service/jobs.py, and service/job_runs.py's record of how a run
ended), on the embedded mode's SQLite database built by the migrations: each write moves a job
only from the status it expects, and writes of an attempt that lost the job change nothing."""

from __future__ import annotations

import signal
import time

import pytest

from cuset_core.training.config import JobSpec
from db.errors import ErrorCode, ErrorInfo
from db.models import Checkpoint, File, Job
from db.session import session_scope
from db.settings import Settings
from db.statuses import JOB_FINAL, JobStatus
from service.job_progress import RunReport
from service.job_runs import record_end
from service.jobs import (
    MAX_ATTEMPTS,
    add_event,
    beat,
    cancel,
    claim,
    fail_attempt,
    finish_attempt,
    finish_validation,
    requeue_or_fail,
)
from tests.integration.job_support import event_rows, stored_row


@pytest.fixture
def settings(sqlite_settings) -> Settings:
    """The embedded settings on a fresh migrated database holding one training file."""
    with session_scope(sqlite_settings.resolved_database_url) as session:
        session.add(File(id="file-1", filename="a.jsonl", purpose="fine-tune", format="jsonl", bytes=1, path="a"))
    return sqlite_settings


def _job(settings: Settings, status: JobStatus, **values) -> str:
    with session_scope(settings.resolved_database_url) as session:
        count = session.query(Job).count()
        job = Job(id=f"ftjob-{count}", model="m", training_file="file-1", spec=JobSpec(), status=status)
        for name, value in values.items():
            setattr(job, name, value)
        session.add(job)
    return job.id


def _claimed(settings: Settings) -> tuple[str, int]:
    job_id = _job(settings, JobStatus.QUEUED)
    with session_scope(settings.resolved_database_url) as session:
        attempt = claim(session, settings, job_id)
    assert attempt == 1
    return job_id, attempt


def test_events_keep_their_order_in_seq(settings):
    job_id = _job(settings, JobStatus.QUEUED)
    with session_scope(settings.resolved_database_url) as session:
        for message in ("one", "two", "three"):
            add_event(session, job_id, message)
            session.flush()
    assert [message for _, message in event_rows(settings.resolved_database_url, job_id)] == ["one", "two", "three"]


def test_validation_queues_the_job_once_and_logs_its_notes(settings):
    job_id = _job(settings, JobStatus.VALIDATING_FILES)
    with session_scope(settings.resolved_database_url) as session:
        assert finish_validation(session, job_id, [("warning", "2 records truncated")], None)
        assert not finish_validation(session, job_id, [], None)  # a redelivered message moves nothing
    assert stored_row(settings.resolved_database_url, Job, job_id).status == JobStatus.QUEUED
    assert event_rows(settings.resolved_database_url, job_id) == [
        ("warning", "2 records truncated"),
        ("info", "Validated training file; job queued"),
    ]


def test_a_failed_validation_ends_the_job_with_its_error(settings):
    job_id = _job(settings, JobStatus.VALIDATING_FILES)
    error = ErrorInfo(
        code=ErrorCode.INVALID_FILE, message="training_file file-1: no usable record", param="training_file"
    )
    with session_scope(settings.resolved_database_url) as session:
        assert finish_validation(session, job_id, [], error)
    job = stored_row(settings.resolved_database_url, Job, job_id)
    assert (job.status, job.error, job.finished_at is not None) == (JobStatus.FAILED, error, True)
    assert event_rows(settings.resolved_database_url, job_id)[-1] == ("error", f"Validation failed: {error.message}")


def test_a_claim_takes_a_queued_job_once(settings):
    job_id, attempt = _claimed(settings)
    with session_scope(settings.resolved_database_url) as session:
        assert claim(session, settings, job_id) is None  # running with a fresh heartbeat: another worker's
    job = stored_row(settings.resolved_database_url, Job, job_id)
    assert (job.status, job.attempts, job.output_dir) == (JobStatus.RUNNING, attempt, f"jobs/{job_id}/out")


def test_a_claim_takes_over_a_job_whose_worker_went_silent(settings):
    job_id, _ = _claimed(settings)
    with session_scope(settings.resolved_database_url) as session:
        session.get(Job, job_id).heartbeat_at = time.time() - 120
    with session_scope(settings.resolved_database_url) as session:
        assert claim(session, settings, job_id) == 2


def test_an_attempt_that_lost_its_job_can_no_longer_change_it(settings):
    job_id, attempt = _claimed(settings)
    with session_scope(settings.resolved_database_url) as session:
        session.get(Job, job_id).heartbeat_at = time.time() - 120
    with session_scope(settings.resolved_database_url) as session:
        assert claim(session, settings, job_id) == attempt + 1
    with session_scope(settings.resolved_database_url) as session:
        assert beat(session, job_id, attempt) == (False, False)
        assert not finish_attempt(session, job_id, attempt, JobStatus.SUCCEEDED)
        assert not fail_attempt(session, job_id, attempt, ErrorCode.TRAINING_FAILED, "boom")
        assert beat(session, job_id, attempt + 1) == (True, False)
    assert stored_row(settings.resolved_database_url, Job, job_id).status == JobStatus.RUNNING


@pytest.mark.parametrize("status", sorted(JOB_FINAL))
def test_a_final_status_sets_the_finish_time(settings, status):
    job_id, attempt = _claimed(settings)
    with session_scope(settings.resolved_database_url) as session:
        assert finish_attempt(session, job_id, attempt, status)
    job = stored_row(settings.resolved_database_url, Job, job_id)
    assert (job.status, job.finished_at is not None, job.eta_s) == (status, True, None)


def test_a_failed_attempt_records_the_error_and_one_line_in_the_log(settings):
    job_id, attempt = _claimed(settings)
    with session_scope(settings.resolved_database_url) as session:
        assert fail_attempt(
            session, job_id, attempt, ErrorCode.TRAINING_FAILED, "Traceback ...\nValueError: bad", "bad"
        )
    job = stored_row(settings.resolved_database_url, Job, job_id)
    assert job.error == ErrorInfo(code=ErrorCode.TRAINING_FAILED, message="Traceback ...\nValueError: bad")
    assert event_rows(settings.resolved_database_url, job_id)[-1] == ("error", "Job failed: bad")


def _checkpoint(settings: Settings, job_id: str, step: int) -> None:
    (settings.artifacts / "jobs" / job_id / "out" / f"checkpoint-{step}").mkdir(parents=True)
    with session_scope(settings.resolved_database_url) as session:
        session.add(
            Checkpoint(id=f"ckpt-{step}", job_id=job_id, step=step, path=f"jobs/{job_id}/out/checkpoint-{step}")
        )


def test_a_lost_job_with_a_checkpoint_is_requeued_to_resume(settings):
    job_id, _ = _claimed(settings)
    _checkpoint(settings, job_id, 8)
    with session_scope(settings.resolved_database_url) as session:
        assert requeue_or_fail(session, settings, session.get(Job, job_id), "worker loss", ErrorCode.WORKER_LOST)
    job = stored_row(settings.resolved_database_url, Job, job_id)
    assert (job.status, job.heartbeat_at, job.finished_at) == (JobStatus.QUEUED, None, None)
    assert event_rows(settings.resolved_database_url, job_id)[-1] == (
        "warning",
        "requeued after worker loss; resuming from step 8",
    )


def test_a_lost_job_without_a_checkpoint_fails(settings):
    job_id, _ = _claimed(settings)
    with session_scope(settings.resolved_database_url) as session:
        assert not requeue_or_fail(session, settings, session.get(Job, job_id), "worker loss", ErrorCode.WORKER_LOST)
    job = stored_row(settings.resolved_database_url, Job, job_id)
    assert job.status == JobStatus.FAILED
    assert job.error.code == "worker_lost"
    assert job.error.message == "The job stopped: worker loss (no checkpoint to resume from)."


def test_a_lost_job_out_of_attempts_fails_even_with_a_checkpoint(settings):
    job_id = _job(settings, JobStatus.RUNNING, attempts=MAX_ATTEMPTS)
    _checkpoint(settings, job_id, 8)
    with session_scope(settings.resolved_database_url) as session:
        assert not requeue_or_fail(session, settings, session.get(Job, job_id), "worker loss", ErrorCode.WORKER_LOST)
    job = stored_row(settings.resolved_database_url, Job, job_id)
    assert job.status == JobStatus.FAILED
    assert job.error.message == f"The job stopped: worker loss ({MAX_ATTEMPTS} attempts used)."


@pytest.mark.parametrize("status", [JobStatus.VALIDATING_FILES, JobStatus.QUEUED])
def test_cancelling_a_job_not_yet_running_ends_it_at_once(settings, status):
    job_id = _job(settings, status)
    with session_scope(settings.resolved_database_url) as session:
        assert cancel(session, job_id)
    job = stored_row(settings.resolved_database_url, Job, job_id)
    assert (job.status, job.cancel_requested, job.finished_at is not None) == (JobStatus.CANCELLED, True, True)
    with session_scope(settings.resolved_database_url) as session:
        assert claim(session, settings, job_id) is None


def test_cancelling_a_running_job_asks_its_worker_to_stop(settings):
    job_id, attempt = _claimed(settings)
    with session_scope(settings.resolved_database_url) as session:
        assert not cancel(session, job_id)
    with session_scope(settings.resolved_database_url) as session:
        assert beat(session, job_id, attempt) == (True, True)
    assert stored_row(settings.resolved_database_url, Job, job_id).status == JobStatus.RUNNING
    assert event_rows(settings.resolved_database_url, job_id)[-1] == (
        "info",
        "Cancellation requested; stopping",
    )


@pytest.mark.parametrize(
    ("returncode", "event"),
    [
        (0, "Job cancelled at step 0; checkpoint saved"),
        (-signal.SIGTERM, "Job cancelled at step 0"),  # the signal came while the run was starting
        (-signal.SIGKILL, "Job cancelled at step 0"),  # it ignored the grace period
    ],
)
def test_a_run_stopped_by_the_cancel_it_was_sent_ends_cancelled_not_failed(settings, tmp_path, returncode, event):
    job_id, attempt = _claimed(settings)
    report = RunReport(returncode=returncode, cancel_sent=True)

    assert record_end(settings, job_id, attempt, report, tmp_path / "train-1.log") is False

    job = stored_row(settings.resolved_database_url, Job, job_id)
    assert (job.status, job.error) == (JobStatus.CANCELLED, None)
    assert event_rows(settings.resolved_database_url, job_id)[-1] == ("warning", event)


def test_a_run_whose_step_outlasts_the_grace_is_stopped_where_it_is_after_a_cancel(settings, tmp_path):
    import subprocess
    import sys

    from worker.supervise import ProgressFollower, supervise

    job_id, attempt = _claimed(settings)
    with session_scope(settings.resolved_database_url) as session:
        cancel(session, job_id)
    # A run that does not heed SIGTERM, as one in the middle of a long step would not for minutes.
    busy = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(300)"
    process = subprocess.Popen([sys.executable, "-c", busy], stdout=subprocess.PIPE)
    process.stdout.readline()  # its handler is in place
    quick = settings.model_copy(update={"heartbeat_interval_s": 0.1, "cancel_grace_s": 0.5})

    report = supervise(
        process, ProgressFollower(tmp_path / "progress.jsonl"), quick, job_id, attempt, tmp_path / "CANCEL"
    )

    assert report.cancel_sent and (tmp_path / "CANCEL").is_file()
    assert report.returncode == -signal.SIGKILL  # stopped, not waited for


def test_a_run_that_died_of_another_signal_after_a_cancel_still_fails_with_its_reason(settings, tmp_path):
    job_id, attempt = _claimed(settings)
    record_end(settings, job_id, attempt, RunReport(returncode=-signal.SIGSEGV, cancel_sent=True), tmp_path / "x.log")

    job = stored_row(settings.resolved_database_url, Job, job_id)
    assert (job.status, job.error.code) == (JobStatus.FAILED, ErrorCode.TRAINING_FAILED)
