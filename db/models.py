"""SQLAlchemy 2.0 models: the service's source of truth. The schema itself comes only from
Alembic migrations (migrations/); a test checks that these models and the migrations agree.

Times are Unix seconds (float), as the OpenAI API reports them. Every user-owned row carries
``owner`` (the API key's owner); queries always filter on it.
"""

from __future__ import annotations

import time
from typing import Annotated

from pydantic import Field
from sqlalchemy import Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from cuset_core.evaluation.config import EvalKnobs
from cuset_core.evaluation.decoding import Answer
from cuset_core.evaluation.metrics import Aggregate, ProblemRow
from cuset_core.evaluation.scoring import SampleRecord
from cuset_core.training.config import JobSpec
from cuset_core.training.progress_lines import Metrics
from cuset_core.verify.result import VerifyResult
from db.confidence_scores import AnswerScores, ConfidenceRequest
from db.errors import ErrorInfo
from db.evals import EvalProgress, EvalSampleRecord
from db.file_warnings import RecordWarning
from db.generations import GenerationRequest, GenerationTimings, Usage
from db.statuses import EvalStatus, GenerationStatus, JobStatus
from db.typed_json import TypedJSON

DEFAULT_OWNER = "local"
RESULTS_PURPOSE = "fine-tune-results"  # OpenAI's purpose of the files a tuning job produced


# A job event's figures by name (OpenAI's free-form ``data``): a step's or a round's numbers, a
# stage's name, the problems a round fed on.
EventData = dict[str, int | float | str | list[str] | None]


class Base(DeclarativeBase):
    """Every table's base: a JSON column names its type (``TypedJSON``), never a bare dict."""


# A confidence row's request reads as one only when it is one (it forbids other fields), so it is
# tried first; every other kind's is a GenerationRequest.
StoredRequest = Annotated[ConfidenceRequest | GenerationRequest, Field(union_mode="left_to_right")]


def _now() -> float:
    return time.time()


class ApiKey(Base):
    """An API key: only its SHA-256 is stored (keys are 256 random bits, so a fast hash is enough);
    ``prefix`` is the first characters, shown in listings so a user can tell keys apart."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(128))
    prefix: Mapped[str] = mapped_column(String(24))
    hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float, default=_now)
    last_used_at: Mapped[float | None] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)


class File(Base):
    """An uploaded dataset (``purpose`` fine-tune or eval) or a job's result (``fine-tune-results``:
    the adapter archive a tuning job wrote), stored under the artifact root."""

    __tablename__ = "files"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), index=True, default=DEFAULT_OWNER)
    filename: Mapped[str] = mapped_column(String(255))
    purpose: Mapped[str] = mapped_column(String(32))
    format: Mapped[str] = mapped_column(String(16))  # jsonl | parquet
    bytes: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(String(512))  # relative to the artifact root
    records: Mapped[int] = mapped_column(Integer, default=0)  # rows kept
    total_rows: Mapped[int] = mapped_column(Integer, default=0)
    warnings: Mapped[list[RecordWarning]] = mapped_column(TypedJSON(list[RecordWarning]), default=list)
    created_at: Mapped[float] = mapped_column(Float, default=_now, index=True)


class Job(Base):
    """A fine-tuning job in the OpenAI shape; ``status`` is authoritative (Celery only dispatches)."""

    __tablename__ = "fine_tuning_jobs"
    __table_args__ = (
        UniqueConstraint("owner", "idempotency_key", name="uq_jobs_owner_idempotency_key"),
        Index("ix_jobs_owner_created", "owner", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), default=DEFAULT_OWNER)
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    model: Mapped[str] = mapped_column(String(255))
    training_file: Mapped[str] = mapped_column(ForeignKey("files.id", ondelete="RESTRICT"))
    validation_file: Mapped[str | None] = mapped_column(ForeignKey("files.id", ondelete="RESTRICT"))
    # A self-training job's problems (a file of purpose problems); None for other jobs.
    problems_file: Mapped[str | None] = mapped_column(ForeignKey("files.id", ondelete="RESTRICT"))
    # What the job asks of training, resolved (every default filled in); the API shows OpenAI's
    # names for it (api/schemas/jobs.py) and the worker extends it to the run's TuneConfig.
    spec: Mapped[JobSpec] = mapped_column(TypedJSON(JobSpec))
    suffix: Mapped[str | None] = mapped_column(String(64))
    user_metadata: Mapped[dict[str, str] | None] = mapped_column("metadata", TypedJSON(dict[str, str]))
    status: Mapped[str] = mapped_column(String(24), index=True, default=JobStatus.VALIDATING_FILES)  # a JobStatus
    error: Mapped[ErrorInfo | None] = mapped_column(TypedJSON(ErrorInfo))
    fine_tuned_model: Mapped[str | None] = mapped_column(String(255), index=True)
    output_dir: Mapped[str | None] = mapped_column(String(512))  # relative to the artifact root
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # times a worker started it
    step: Mapped[int] = mapped_column(Integer, default=0)
    total_steps: Mapped[int | None] = mapped_column(Integer)
    trained_tokens: Mapped[int | None] = mapped_column(Integer)
    eta_s: Mapped[float | None] = mapped_column(Float)
    # Unix seconds: when the last recorded step's pace says the run ends (that step's time + eta_s),
    # so every read of a job between two steps shows the same time.
    estimated_finish: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float, default=_now)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    heartbeat_at: Mapped[float | None] = mapped_column(Float)
    # Files the job produced (the adapter archive), ids of ``files`` rows of purpose fine-tune-results.
    result_files: Mapped[list[str]] = mapped_column(TypedJSON(list[str]), default=list)

    events: Mapped[list[JobEvent]] = relationship(
        back_populates="job", cascade="all, delete-orphan", passive_deletes=True
    )

    @property
    def base_model(self) -> str:
        """The base model id this job's model descends from (``ft:<base>:...`` names carry it)."""
        return self.model.split(":")[1] if self.model.startswith("ft:") else self.model

    @property
    def tuned_model_name(self) -> str:
        """``ft:<base>:<suffix>:<job id>``, the suffix part empty when none was given (OpenAI's
        form), so every fine-tuned model id has four parts: the name the result has, known before
        the job ends so checkpoints can be named after it."""
        return f"ft:{self.base_model}:{self.suffix or ''}:{self.id}"


class JobEvent(Base):
    """One line of a job's log (``GET .../events``)."""

    __tablename__ = "fine_tuning_job_events"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("fine_tuning_jobs.id", ondelete="CASCADE"), index=True)
    level: Mapped[str] = mapped_column(String(8), default="info")
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[EventData | None] = mapped_column(TypedJSON(EventData))
    created_at: Mapped[float] = mapped_column(Float, default=_now)
    seq: Mapped[int] = mapped_column(Integer, default=0)  # order within a job (times can tie)

    job: Mapped[Job] = relationship(back_populates="events")


class JobMetric(Base):
    """The training metrics of one optimizer step (loss, ce, kept_ratio, learning_rate, ...)."""

    __tablename__ = "fine_tuning_job_metrics"

    job_id: Mapped[str] = mapped_column(ForeignKey("fine_tuning_jobs.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    values: Mapped[Metrics] = mapped_column(TypedJSON(Metrics))
    created_at: Mapped[float] = mapped_column(Float, default=_now)


class Checkpoint(Base):
    """A saved training checkpoint (peft adapter folder) of a job."""

    __tablename__ = "fine_tuning_job_checkpoints"
    __table_args__ = (UniqueConstraint("job_id", "step", name="uq_checkpoints_job_step"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("fine_tuning_jobs.id", ondelete="CASCADE"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(String(512))  # relative to the artifact root
    metrics: Mapped[Metrics | None] = mapped_column(TypedJSON(Metrics))
    created_at: Mapped[float] = mapped_column(Float, default=_now)


class Generation(Base):
    """One inference request (/v1/generate, completions, chat): queued, decoded by a gpu worker,
    its samples (``GenerationSampleRow``) verified by cpu workers; or one confidence request,
    whose answer is ``confidence``."""

    __tablename__ = "generations"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), index=True, default=DEFAULT_OWNER)
    model: Mapped[str] = mapped_column(String(255), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # a GenerationKind
    request: Mapped[GenerationRequest | ConfidenceRequest] = mapped_column(TypedJSON(StoredRequest))
    status: Mapped[str] = mapped_column(String(16), index=True, default=GenerationStatus.QUEUED)  # a GenerationStatus
    confidence: Mapped[AnswerScores | None] = mapped_column(TypedJSON(AnswerScores))  # kind "confidence" only
    usage: Mapped[Usage | None] = mapped_column(TypedJSON(Usage))
    timings: Mapped[GenerationTimings | None] = mapped_column(TypedJSON(GenerationTimings))
    error: Mapped[ErrorInfo | None] = mapped_column(TypedJSON(ErrorInfo))
    created_at: Mapped[float] = mapped_column(Float, default=_now)
    finished_at: Mapped[float | None] = mapped_column(Float)


class GenerationSampleRow(Base):
    """One attempt of a generation (``db.generations.GenerationSample`` is its typed view): its
    text so far while decoding, then its whole answer, extracted code and verification. A row of
    its own, so that a decoding flush or a verification writes one attempt, not all of them."""

    __tablename__ = "generation_samples"

    generation_id: Mapped[str] = mapped_column(ForeignKey("generations.id", ondelete="CASCADE"), primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    prompt_index: Mapped[int] = mapped_column(Integer, default=0)
    round: Mapped[int] = mapped_column(Integer, default=0)
    repair_of: Mapped[int | None] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text, default="")
    finish_reason: Mapped[str | None] = mapped_column(String(32))
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    code: Mapped[str | None] = mapped_column(Text)
    verification: Mapped[VerifyResult | None] = mapped_column(TypedJSON(VerifyResult))
    cancelled: Mapped[bool] = mapped_column(Boolean, default=False)


class Eval(Base):
    """An evaluation of a model over the problems of an eval file (or the demo set)."""

    __tablename__ = "evals"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), index=True, default=DEFAULT_OWNER)
    model: Mapped[str] = mapped_column(String(255))
    eval_file: Mapped[str | None] = mapped_column(ForeignKey("files.id", ondelete="RESTRICT"))
    problems: Mapped[str | None] = mapped_column(String(64))  # "demo" / "demo:held-out" when no file
    config: Mapped[EvalKnobs] = mapped_column(TypedJSON(EvalKnobs))
    status: Mapped[str] = mapped_column(String(16), index=True, default=EvalStatus.QUEUED)  # an EvalStatus
    progress: Mapped[EvalProgress | None] = mapped_column(TypedJSON(EvalProgress))
    aggregate: Mapped[Aggregate | None] = mapped_column(TypedJSON(Aggregate))
    error: Mapped[ErrorInfo | None] = mapped_column(TypedJSON(ErrorInfo))
    created_at: Mapped[float] = mapped_column(Float, default=_now, index=True)
    finished_at: Mapped[float | None] = mapped_column(Float)
    heartbeat_at: Mapped[float | None] = mapped_column(Float)  # while running; the reaper watches it


class EvalProblem(Base):
    """One problem of an eval: its code from when its answers were generated, then, once every
    attempt is verified (``recorded``), its pass counts per tier and every sample with its result."""

    __tablename__ = "eval_problems"

    eval_id: Mapped[str] = mapped_column(ForeignKey("evals.id", ondelete="CASCADE"), primary_key=True)
    problem_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    code: Mapped[str | None] = mapped_column(Text)  # None in rows stored before attempts had rows
    row: Mapped[ProblemRow | None] = mapped_column(TypedJSON(ProblemRow))
    samples: Mapped[list[EvalSampleRecord] | None] = mapped_column(TypedJSON(list[EvalSampleRecord]))

    @classmethod
    def recorded(cls):
        """The SQL condition of a problem whose row is written."""
        return cls.row.is_not(None)


class EvalAttempt(Base):
    """One attempt at a problem of an eval: a drawn answer (round 0) or the repair of attempt
    ``repair_of`` (round r), and once verified, its scored record. The eval's tasks pass only
    ``(eval_id, problem_id)``; what they work on is here."""

    __tablename__ = "eval_attempts"

    eval_id: Mapped[str] = mapped_column(ForeignKey("evals.id", ondelete="CASCADE"), primary_key=True)
    problem_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    round: Mapped[int] = mapped_column(Integer, default=0)
    repair_of: Mapped[int | None] = mapped_column(Integer)
    answer: Mapped[Answer] = mapped_column(TypedJSON(Answer))
    record: Mapped[SampleRecord | None] = mapped_column(TypedJSON(SampleRecord))
