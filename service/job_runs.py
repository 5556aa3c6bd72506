"""One attempt of a fine-tuning job, as the service sees it: the run's config written and its
command chosen (``prepare_run``), and the job settled from how the run ended (``record_end``,
``fail_run``). The worker (worker/tasks/tune.py) launches and follows the process between the two.

A plain job runs ``python -m cuset_core.training job.json`` (or the configured launcher); a
self-training job runs ``python -m cuset_core.improve improve.json``. Both resume: a plain job
from its last checkpoint, a self-training one from the stages a stopped attempt finished.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from cuset_core.improve.loop import KEPT_FILE, PROGRESS_FILE, SelfTrainingConfig
from cuset_core.training.config import TuneConfig
from cuset_core.training.launch import training_command
from db.errors import ErrorCode
from db.models import File, Job
from db.session import session_scope
from db.settings import Settings
from db.statuses import JobStatus
from service.job_progress import RunReport
from service.job_results import adapter_archive, kept_file
from service.jobs import (
    MAX_ATTEMPTS,
    add_event,
    fail_attempt,
    finish_attempt,
    job_dir,
    model_spec,
    requeue,
    resume_point,
)

STDERR_TAIL_CHARS = 2000


@dataclass(frozen=True)
class RunPlan:
    """What the worker launches for an attempt: the command, the progress file it appends to and
    the log file its stderr goes to."""

    command: list[str]
    progress: Path
    log_path: Path


def prepare_run(settings: Settings, job_id: str, attempt: int) -> RunPlan:
    """Write the attempt's run config and log that it started; its ``RunPlan``."""
    folder = job_dir(settings, job_id)
    with session_scope(settings.resolved_database_url) as session:
        job = session.get_one(Job, job_id)
        spec = model_spec(session, settings, job)
        training = session.get_one(File, job.training_file)
        if job.spec.self_training is not None:
            improve = write_improve_config(settings, job, spec, training, session.get_one(File, job.problems_file))
            progress = improve.out_dir / PROGRESS_FILE
            command = [sys.executable, "-m", "cuset_core.improve", str(folder / "improve.json")]
            resuming = (improve.out_dir / "round_1").is_dir()
            job.total_steps = improve.rounds  # a self-training job counts its progress in rounds
        else:
            if job.model not in settings.base_models:
                spec = _merged_base(spec, folder / "base")
            validation = session.get_one(File, job.validation_file) if job.validation_file else None
            config = write_config(settings, job, spec, training, validation)
            progress = config.progress_path
            command = training_command(settings.training_launcher, folder / "job.json")
            resuming = bool(config.resume)
        add_event(
            session,
            job_id,
            f"Fine-tuning job started (attempt {attempt})"
            + (", resuming from the last checkpoint" if resuming else ""),
        )
    return RunPlan(command, progress, folder / f"train-{attempt}.log")


def _merged_base(adapter_dir: str, dest: Path) -> str:
    """A full model folder of a tuned adapter merged into its base: the core tunes base models
    only, so a fine-tuned model is tuned further as a plain model (written once per job)."""
    if not (dest / "config.json").is_file():
        from cuset_core.models import load_model

        model, tokenizer = load_model(adapter_dir)
        model.merge_and_unload().save_pretrained(dest)
        tokenizer.save_pretrained(dest)
    return str(dest)


def write_config(settings: Settings, job: Job, spec: str, training: File, validation: File | None) -> TuneConfig:
    """The job's TuneConfig, written to ``jobs/<id>/job.json``; resumes when a checkpoint exists."""
    folder = job_dir(settings, job.id)
    out = folder / "out"
    config = TuneConfig(
        **dict(job.spec),
        model=spec,
        train_file=settings.artifacts / training.path,
        validation_file=settings.artifacts / validation.path if validation else None,
        output_dir=out,
        resume=any(out.glob("checkpoint-*")),
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.json").write_text(config.model_dump_json(indent=2))
    return config


def write_improve_config(settings: Settings, job: Job, spec: str, training: File, problems: File) -> SelfTrainingConfig:
    """A self-training job's run config, written to ``jobs/<id>/improve.json``: its rounds over the
    problems file, tuning on the training file plus what the rounds keep (the loop resumes from
    the stages a stopped attempt finished)."""
    assert job.spec.self_training is not None
    folder = job_dir(settings, job.id)
    config = SelfTrainingConfig(
        **job.spec.self_training.model_dump(),
        model=spec,
        problems=str(settings.artifacts / problems.path),
        out_dir=folder / "out",
        train_file=settings.artifacts / training.path,
        prompt_style=job.spec.prompt_style,
        method=job.spec.method,
        lora=job.spec.lora,
        hyperparameters=job.spec.hyperparameters,
        seed=job.spec.seed,
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "improve.json").write_text(config.model_dump_json(indent=2))
    return config


def record_end(settings: Settings, job_id: str, attempt: int, report: RunReport, log_path: Path) -> bool:
    """Settle the job after its subprocess exited; True when it was requeued."""
    with session_scope(settings.resolved_database_url) as session:
        job = session.get_one(Job, job_id)
        if report.done is not None and report.returncode == 0:
            name = job.tuned_model_name
            output = Path(report.done.output_dir).resolve()
            results = [adapter_archive(settings, job, output)] if job.spec.lora is not None else []
            kept = output_root(settings, job) / KEPT_FILE
            if job.spec.self_training is not None and kept.is_file() and kept.stat().st_size:
                results.append(kept_file(settings, job, kept))
            if finish_attempt(
                session,
                job_id,
                attempt,
                JobStatus.SUCCEEDED,
                fine_tuned_model=name,
                output_dir=output.relative_to(settings.artifacts.resolve()).as_posix(),
                step=report.done.steps,
                trained_tokens=report.done.train_tokens,
                result_files=[result.id for result in results],
            ):
                session.add_all(results)
                add_event(session, job_id, f"New fine-tuned model created: {name}")
                add_event(session, job_id, "The job has successfully completed")
            else:
                for result in results:
                    (settings.artifacts / result.path).unlink(missing_ok=True)
            return False
        if report.wall_clock_hit:
            limit = settings.job_max_wall_s
            message = (
                f"the job ran past its wall-clock limit of {limit:g} s (setting job_max_wall_s) and was "
                f"stopped at step {job.step}; its last checkpoint is kept"
            )
            fail_attempt(session, job_id, attempt, ErrorCode.WALL_CLOCK_LIMIT, message)
            return False
        if report.cancel_sent and report.returncode in (0, -signal.SIGTERM, -signal.SIGKILL):
            # 0: the run saved a checkpoint and stopped. Killed by our own signal: it was still
            # starting (the signal came before its handler) or ignored the grace period.
            saved = "; checkpoint saved" if report.returncode == 0 else ""
            if finish_attempt(session, job_id, attempt, JobStatus.CANCELLED):
                add_event(session, job_id, f"Job cancelled at step {job.step}{saved}", level="warning")
            return False
        if report.returncode == 0 or report.returncode in (-signal.SIGTERM, -signal.SIGKILL):
            # Stopped by a signal nobody here sent (the worker is shutting down: the run saved a
            # checkpoint, or was killed when its step outlasted the stop): run it again later.
            how = "interrupted" if report.returncode == 0 else f"interrupted ({_signal_name(report.returncode)})"
            if job.spec.self_training is not None and attempt < MAX_ATTEMPTS:
                return requeue(session, job_id, attempt, f"{how}; requeued to resume at the first unfinished stage")
            checkpoint = resume_point(session, settings, job_id, attempt)
            if checkpoint is not None:
                return requeue(session, job_id, attempt, f"{how}; requeued to resume from step {checkpoint.step}")
            if attempt < MAX_ATTEMPTS:
                return requeue(session, job_id, attempt, f"{how} before its first checkpoint; requeued to start over")
            message = f"The run was {how} (the worker stopped) on its last allowed attempt ({MAX_ATTEMPTS})."
            fail_attempt(session, job_id, attempt, ErrorCode.WORKER_LOST, message, f"{how} on its last attempt")
            return False
        code = ErrorCode.INVALID_CONFIG if report.returncode == 2 else ErrorCode.TRAINING_FAILED
        message = report.error or _stderr_tail(log_path)
        fail_attempt(session, job_id, attempt, code, message, message.splitlines()[-1] if message else code)
        return False


def _stderr_tail(log_path: Path) -> str:
    text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    # Progress bars redraw with carriage returns; keep real lines only.
    lines = [line.rsplit("\r", 1)[-1] for line in text.splitlines() if line.strip()]
    return "\n".join(lines)[-STDERR_TAIL_CHARS:] or "no output"


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def output_root(settings: Settings, job: Job) -> Path:
    """The folder a job's run writes to (a self-training job's rounds are folders in it)."""
    return job_dir(settings, job.id) / "out"


def fail_run(settings: Settings, job_id: str, attempt: int, exc: BaseException) -> None:
    with session_scope(settings.resolved_database_url) as session:
        fail_attempt(session, job_id, attempt, ErrorCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
