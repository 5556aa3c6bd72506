"""The service's one settings object, read from ``CUSET_*`` environment variables.

It lives in db/ because both api/ and worker/ read it and both depend on db/ (never on each
other). With nothing set, everything is embedded: SQLite and a SQLite-backed Celery broker
under ``data_dir``, so ``cuset serve`` needs no server.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cuset_core.generation.endpoint import OPENAI_PREFIX, parse_endpoint


class EngineConfig(BaseModel):
    """An OpenAI-compatible engine (vLLM, SGLang, TGI, llama.cpp server) that decodes one base
    model and its tuned adapters, each adapter registered there under its fine-tuned model id
    (vLLM: ``--lora-modules ft:base:suffix=/path/to/adapter``)."""

    model_config = {"extra": "forbid"}

    url: str = Field(description="the engine's OpenAI base URL, as the openai client takes it: http://host:8000/v1")
    model: str | None = Field(None, description="the base model's name at the engine; default the base model id")
    api_key_env: str | None = Field(
        None, description="environment variable holding the engine's API key (sent as a bearer token); none: no key"
    )
    supports_n: bool = Field(
        True,
        description="whether the engine returns n choices per request; off (llama.cpp server, some TGI builds): "
        "n samples go as n requests. An engine that refuses n > 1 is also found out at the first such request",
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parse_endpoint(f"{OPENAI_PREFIX}{url}#model")  # the same URL rule as cuset eval's openai:URL#NAME
        return url.rstrip("/")


class Settings(BaseSettings):
    """Service configuration; every field can be set as ``CUSET_<FIELD>`` (sizes in MiB, times in s)."""

    model_config = SettingsConfigDict(env_prefix="CUSET_", extra="ignore")

    data_dir: Path = Field(Path.home() / ".cuset", description="embedded database, broker and artifacts")
    database_url: str | None = Field(None, description="SQLAlchemy URL; default SQLite in data_dir")
    broker_url: str | None = Field(None, description="Celery broker URL; default SQLite in data_dir")
    broker_key_prefix: str = Field("", description="prefix of every broker key (isolates services sharing a Redis)")
    artifact_root: Path | None = Field(
        None, description="uploads, checkpoints, adapters, logs; default data_dir/artifacts"
    )

    base_models: dict[str, str] = Field(
        default_factory=lambda: {"smollm2-135m": "smollm2-135m"},
        description="model id served as a base -> its cuset_core model spec: the bundled name, a GGUF file, "
        "a Hugging Face folder or a Hugging Face repo id (org/name, from the HF cache or the Hub)",
    )
    shipped_adapters: bool = Field(
        True, description="serve the LoRA adapters shipped with the package (cuset-ew-135m) by name, to every owner"
    )

    inference_engines: dict[str, EngineConfig] = Field(
        default_factory=dict,
        description="base model id -> the OpenAI-compatible engine that decodes it and its tuned adapters "
        "(generations and evals of those models go there; models without one decode in the worker)",
    )

    auth: bool = Field(True, description="require `Authorization: Bearer <key>` on /v1 (off only on localhost)")
    rate_limit_rps: float = Field(50.0, ge=0, description="requests per second per key; 0 turns it off")
    rate_limit_burst: int = Field(100, ge=1, description="requests a key may make at once above the rate")
    redis_url: str | None = Field(None, description="Redis for rate limits; default the broker when it is Redis")
    max_request_mb: float = Field(8.0, gt=0, description="body size of requests other than uploads")
    max_concurrent_jobs: int = Field(4, ge=1, description="queued or running tuning jobs per owner")
    max_upload_mb: int = Field(512, ge=1)
    max_records_per_file: int = Field(200_000, ge=1)
    max_generation_tokens: int = Field(4096, ge=1, description="max_tokens ceiling per request")
    max_context_tokens: int = Field(
        0,
        ge=0,
        description="ceiling on a request's prompt tokens plus max_tokens, below the model's own context length "
        "(which always applies); 0: the model's context length alone",
    )
    max_generation_s: float = Field(
        600.0,
        gt=0,
        description="wall-clock cap of one request's decoding (a repair attempt's, of its own): past it the "
        "attempts still decoding end with finish_reason length",
    )
    max_samples_per_request: int = Field(16, ge=1)
    max_repair_rounds: int = Field(4, ge=0, description="repair_rounds ceiling of /v1/generate and /v1/evals")

    verify_cache_dir: Path | None = Field(
        None,
        description="verification results cache; default the core's (~/.cache/cuset/verify), "
        "outside data_dir and the artifact root, which candidates never see",
    )
    warm_sides: bool = Field(
        True,
        description="each worker process keeps a tier-2 reference side and candidate side started ahead of its "
        "next check (cuset_core/verify/execution/tier_run.py: about 1 s less per check, about 0.5 GiB held)",
    )
    heartbeat_interval_s: float = Field(5.0, gt=0, description="a running job's heartbeat period")
    cancel_grace_s: float = Field(
        10.0,
        ge=0,
        description="after a cancel (or the wall-clock limit) reaches a running job, how long its run may take to "
        "end its step with a checkpoint before it is stopped where it is (its last checkpoint is kept)",
    )
    heartbeat_timeout_s: float = Field(60.0, gt=0, description="silence after which the reaper acts")
    sandbox_probe_interval_s: float = Field(
        60.0, gt=0, description="how often each worker probes the verification sandbox again for /readyz"
    )
    reaper_interval_s: float = Field(30.0, gt=0)
    visibility_timeout_s: int = Field(7 * 24 * 3600, ge=60, description="longer than the longest job")
    generation_timeout_s: float = Field(900.0, gt=0, description="how long a request waits for its generation")
    job_max_wall_s: float = Field(
        3 * 24 * 3600.0,
        gt=0,
        description="wall-clock limit of one attempt of a tuning job: it is stopped (checkpoint saved) and fails",
    )
    generation_batch_max: int = Field(8, ge=1, description="queued requests for one model decoded together")
    generation_batch_wait_s: float = Field(
        0.1,
        ge=0,
        description="how long a batchable request waits for another to share its batch (again after each one "
        "joins: requests sent together reach the queue ms apart); 0 decodes what is queued at once",
    )
    model_release_timeout_s: float = Field(
        120.0,
        ge=0,
        description="how long a training run waits for the generation workers on its device to release their models",
    )
    training_launcher: list[str] = Field(
        default_factory=list, description='e.g. ["accelerate", "launch"]; empty: python'
    )
    train_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="least OS niceness of training subprocesses: on a host shared with the API, training "
        "yields the CPU to requests (an idle host loses nothing); 0 keeps the worker's priority",
    )

    @model_validator(mode="after")
    def _engines_serve_base_models(self) -> Settings:
        unknown = sorted(set(self.inference_engines) - set(self.base_models))
        if unknown:
            raise ValueError(
                f"inference_engines: {unknown} are not base models; engines decode base models "
                f"(and their tuned adapters), which are {sorted(self.base_models)}"
            )
        return self

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'cuset.sqlite'}"

    @property
    def resolved_broker_url(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{self.data_dir / 'broker.sqlite'}"

    @property
    def resolved_redis_url(self) -> str | None:
        """Redis for rate limits: the configured one, else the broker if it is Redis, else none."""
        if self.redis_url:
            return self.redis_url
        broker = self.resolved_broker_url
        return broker if broker.startswith(("redis://", "rediss://")) else None

    @property
    def artifacts(self) -> Path:
        """The artifact root; every stored file lives under it."""
        return (self.artifact_root or self.data_dir / "artifacts").resolve()

    def sandbox_hidden_paths(self) -> list[Path]:
        """What verification candidates must not see: the data dir, the artifact root and a
        SQLite database kept elsewhere. (The verification cache must live outside them.)"""
        hidden = [self.data_dir.resolve(), self.artifacts]
        url = self.resolved_database_url
        if url.startswith("sqlite:///"):
            hidden.append(Path(url.removeprefix("sqlite:///")).resolve())
        return hidden

    @property
    def embedded(self) -> bool:
        """True when the database is SQLite (one machine, no servers)."""
        return self.resolved_database_url.startswith("sqlite")


def get_settings() -> Settings:
    """Settings read from the environment now (tests change the environment between runs)."""
    return Settings()
