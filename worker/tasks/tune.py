"""``cuset.tune`` (train queue): claim a queued job, run ``python -m cuset_core.training job.json``
(or, for a self-training job, ``python -m cuset_core.improve improve.json``) as a subprocess, follow
it (worker/supervise.py) and record how it ended.

The claim is one conditional UPDATE, so a redelivered message or a second worker cannot run a
job twice. Every way out of the task leaves the job in a non-running state, except a worker
killed outright; the reaper settles that one.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from celery import shared_task

from cuset_core.improve.loop import KEPT_FILE, PROGRESS_FILE, SelfTrainingConfig
from cuset_core.training.callbacks import CANCEL_FILE
from cuset_core.training.config import TuneConfig
from cuset_core.training.export import write_archive
from cuset_core.training.launch import training_command
from db.dispatch import TaskName, send_tune
from db.errors import ErrorCode
from db.ids import new_id
from db.job_rows import (
    MAX_ATTEMPTS,
    add_event,
    claim,
    fail_attempt,
    finish_attempt,
    job_dir,
    model_spec,
    requeue,
    resume_point,
)
from db.models import RESULTS_PURPOSE, File, Job
from db.session import session_scope
from db.settings import Settings
from db.statuses import JobStatus
from worker.heartbeat import heartbeat
from worker.runtime import RuntimeTask, WorkerRuntime
from worker.supervise import ProgressFollower, RunReport, stop, supervise

log = logging.getLogger(__name__)
STDERR_TAIL_CHARS = 2000


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


def _start(runtime: WorkerRuntime, job_id: str, attempt: int) -> tuple[subprocess.Popen, ProgressFollower, Path]:
    """Write the config and launch the run's subprocess; its stderr goes to a log file."""
    settings = runtime.settings
    folder = job_dir(settings, job_id)
    with session_scope(settings.resolved_database_url) as session:
        job = session.get(Job, job_id)
        spec = model_spec(session, settings, job)
        training = session.get(File, job.training_file)
        if job.spec.self_training is not None:
            improve = write_improve_config(settings, job, spec, training, session.get(File, job.problems_file))
            progress = improve.out_dir / PROGRESS_FILE
            command = [sys.executable, "-m", "cuset_core.improve", str(folder / "improve.json")]
            resuming = (improve.out_dir / "round_1").is_dir()
            job.total_steps = improve.rounds  # a self-training job counts its progress in rounds
        else:
            if job.model not in settings.base_models:
                spec = _merged_base(spec, folder / "base")
            validation = session.get(File, job.validation_file) if job.validation_file else None
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
    # The device goes to the training run: the models kept on it for generation, by this process
    # or by the infer worker beside it, leave it first.
    runtime.free_device()
    offset = progress.stat().st_size if progress.is_file() else 0  # earlier attempts' lines are recorded
    log_path = folder / f"train-{attempt}.log"
    with log_path.open("wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, stdin=subprocess.DEVNULL)
    _lower_priority(process.pid, settings.train_nice)
    return process, ProgressFollower(progress, offset), log_path


def _lower_priority(pid: int, nice: int) -> None:
    """Run the training process (and what it starts later: data loader workers, launcher ranks)
    at niceness ``nice`` or more, so it does not slow the API on a shared host. Never raises
    a priority: an operator who niced the worker further keeps that."""
    try:
        if nice > os.getpriority(os.PRIO_PROCESS, pid):
            os.setpriority(os.PRIO_PROCESS, pid, nice)
    except ProcessLookupError:
        pass  # it exited already; the supervisor reports how


def _stderr_tail(log_path: Path) -> str:
    text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    # Progress bars redraw with carriage returns; keep real lines only.
    lines = [line.rsplit("\r", 1)[-1] for line in text.splitlines() if line.strip()]
    return "\n".join(lines)[-STDERR_TAIL_CHARS:] or "no output"


def _record_end(settings: Settings, job_id: str, attempt: int, report: RunReport, log_path: Path) -> bool:
    """Settle the job after its subprocess exited; True when it was requeued."""
    with session_scope(settings.resolved_database_url) as session:
        job = session.get(Job, job_id)
        if report.done is not None and report.returncode == 0:
            name = job.tuned_model_name
            output = Path(report.done.output_dir).resolve()
            results = [_adapter_archive(settings, job, output)] if job.spec.lora is not None else []
            kept = output_root(settings, job) / KEPT_FILE
            if job.spec.self_training is not None and kept.is_file() and kept.stat().st_size:
                results.append(_kept_file(settings, job, kept))
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


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def output_root(settings: Settings, job: Job) -> Path:
    """The folder a job's run writes to (a self-training job's rounds are folders in it)."""
    return job_dir(settings, job.id) / "out"


def _kept_file(settings: Settings, job: Job, kept: Path) -> File:
    """The answers a self-training job kept, copied out as a training file of its owner (purpose
    fine-tune, one chat row per answer); its ``files`` row, not yet added."""
    file_id = new_id("file")
    relative = Path("jobs") / job.id / f"{file_id}.jsonl"
    shutil.copyfile(kept, settings.artifacts / relative)
    rows = sum(1 for line in kept.read_text().splitlines() if line.strip())
    return File(
        id=file_id,
        owner=job.owner,
        filename=f"{job.id}-kept.jsonl",
        purpose="fine-tune",
        format="jsonl",
        bytes=(settings.artifacts / relative).stat().st_size,
        path=relative.as_posix(),
        records=rows,
        total_rows=rows,
        warnings=[],
    )


def _adapter_archive(settings: Settings, job: Job, adapter_dir: Path) -> File:
    """Write the LoRA adapter in ``adapter_dir`` (adapter_config.json + adapter_model.safetensors)
    into one tar file in the job's folder; returns its ``files`` row (purpose fine-tune-results),
    not yet added.

    The adapter config names its base as engines and peft can find it: the Hugging Face repo id
    when the base is served from one, else the model id the job tuned (never a server path)."""
    file_id = new_id("file")
    relative = Path("jobs") / job.id / f"{file_id}.tar"
    spec = settings.base_models.get(job.model)
    base_model = spec if spec is not None and not Path(spec).expanduser().exists() else job.model
    size = write_archive(adapter_dir, settings.artifacts / relative, folder=job.id, base_model=base_model)
    return File(
        id=file_id,
        owner=job.owner,
        filename=f"{job.id}-adapter.tar",
        purpose=RESULTS_PURPOSE,
        format="tar",
        bytes=size,
        path=relative.as_posix(),
        records=0,
        total_rows=0,
        warnings=[],
    )


def _fail(settings: Settings, job_id: str, attempt: int, exc: BaseException) -> None:
    with session_scope(settings.resolved_database_url) as session:
        fail_attempt(session, job_id, attempt, ErrorCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")


@shared_task(name=TaskName.TUNE, base=RuntimeTask, bind=True)
def tune(self: RuntimeTask, job_id: str) -> None:
    """Run one attempt of a fine-tuning job, start to end."""
    settings = self.runtime.settings
    with session_scope(settings.resolved_database_url) as session:
        attempt = claim(session, settings, job_id)
    if attempt is None:
        log.info("job %s is not claimable; skipping", job_id)
        return
    process = None
    try:
        # Starting can wait minutes (a generation finishing before the device is freed, a base
        # model merged): the job must not look silent to the reaper meanwhile.
        with heartbeat(settings.resolved_database_url, Job, job_id, settings.heartbeat_interval_s):
            process, follower, log_path = _start(self.runtime, job_id, attempt)
        report = supervise(
            process, follower, settings, job_id, attempt, job_dir(settings, job_id) / "out" / CANCEL_FILE
        )
        if report.lost:
            log.warning("job %s was taken from attempt %d", job_id, attempt)
            return
        requeued = _record_end(settings, job_id, attempt, report, log_path)
    except BaseException as exc:
        log.exception("job %s attempt %d failed", job_id, attempt)
        if process is not None:
            stop(process)
        _fail(settings, job_id, attempt, exc)
        raise
    if requeued:
        send_tune(settings, job_id)
