"""What failed, in one shape: the error a job, generation or eval row stores (written by a worker,
the reaper or the API) and the error object of an API response, both OpenAI's
``{"code", "message", "param"}``. ``ErrorCode`` names every code the service uses, so a client can
rely on the list (the OpenAPI schema at ``/docs`` lists it) and a typo fails where it is written.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field


class ErrorCode(StrEnum):
    """Every error code the service answers or stores."""

    # A row's failure: a job, generation or eval that ended failed.
    WORKER_LOST = "worker_lost"
    TIMEOUT = "timeout"
    GENERATION_TIMEOUT = "generation_timeout"
    CLIENT_GONE = "client_gone"
    SHUTTING_DOWN = "shutting_down"  # the service stopped while the row was in flight
    INVALID_FILE = "invalid_file"
    VALIDATION_ERROR = "validation_error"
    INVALID_CONFIG = "invalid_config"
    TRAINING_FAILED = "training_failed"
    WALL_CLOCK_LIMIT = "wall_clock_limit"
    INTERNAL_ERROR = "internal_error"
    MODEL_LOAD_FAILED = "model_load_failed"
    MODEL_UNAVAILABLE = "model_unavailable"
    DECODE_FAILED = "decode_failed"
    CONFIDENCE_FAILED = "confidence_failed"
    RECORD_NOT_FOUND = "record_not_found"
    ENGINE_UNREACHABLE = "engine_unreachable"
    ENGINE_ERROR = "engine_error"
    INVALID_EVAL_INPUT = "invalid_eval_input"
    EVAL_FAILED = "eval_failed"
    GENERATION_FAILED = "generation_failed"
    NO_ANSWER = "no_answer"
    VERIFIER_UNAVAILABLE = "verifier_unavailable"  # tier 2 cannot run on this machine (its probe fails)
    # A request's refusal (the API's 4xx/5xx).
    INVALID_REQUEST = "invalid_request"
    INVALID_VALUE = "invalid_value"
    INVALID_CURSOR = "invalid_cursor"
    MISSING_REQUIRED_PARAMETER = "missing_required_parameter"
    MISSING_API_KEY = "missing_api_key"
    INVALID_API_KEY = "invalid_api_key"
    RATE_LIMIT_EXCEEDED = "rate_limit_exceeded"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    FILE_NOT_FOUND = "file_not_found"
    EVAL_NOT_FOUND = "eval_not_found"
    MODEL_NOT_FOUND = "model_not_found"
    FINE_TUNING_JOB_NOT_FOUND = "fine_tuning_job_not_found"
    MODEL_NOT_AVAILABLE = "model_not_available"
    FILE_TOO_LARGE = "file_too_large"
    REQUEST_TOO_LARGE = "request_too_large"
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
    FILE_IN_USE = "file_in_use"
    FILE_CONTENT_MISSING = "file_content_missing"
    INVALID_FILE_FORMAT = "invalid_file_format"
    INVALID_FILE_PURPOSE = "invalid_file_purpose"
    INVALID_EVAL_FILE = "invalid_eval_file"
    EVAL_SET_OVERLAP = "eval_set_overlap"
    NOT_A_DATASET = "not_a_dataset"
    JOB_NOT_CANCELLABLE = "job_not_cancellable"
    EVAL_NOT_CANCELLABLE = "eval_not_cancellable"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    CONCURRENT_JOBS_LIMIT = "concurrent_jobs_limit"
    INTEGRATION_UNAVAILABLE = "integration_unavailable"
    UNSUPPORTED_ON_THIS_SERVER = "unsupported_on_this_server"
    INSUFFICIENT_STORAGE = "insufficient_storage"
    DATABASE_UNAVAILABLE = "database_unavailable"
    DATABASE_BUSY = "database_busy"
    BROKER_UNAVAILABLE = "broker_unavailable"


class ErrorInfo(BaseModel):
    """One error: its code, a message for humans, and the request field it concerns."""

    code: ErrorCode
    message: str
    param: str | None = Field(None, description="the request field the error concerns, if one")
