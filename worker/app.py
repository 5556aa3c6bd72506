"""The worker's Celery app: ``celery -A worker.app worker -Q gpu`` (or ``-Q cpu``)."""

from __future__ import annotations

import logging
import os

from celery.signals import worker_ready, worker_shutdown

from cuset_core.verify.sandbox import HIDE_ENV, log_isolation
from cuset_core.verify.settings import SandboxSettings
from db.dispatch import make_celery
from db.settings import get_settings
from db.worker_status import forget_sandbox, record_sandbox

settings = get_settings()
app = make_celery(settings)
# Candidate kernels run in the sandbox; it also hides what this service keeps on disk from them.
os.environ[HIDE_ENV] = os.pathsep.join(str(path) for path in settings.sandbox_hidden_paths())


@worker_ready.connect
def _check_sandbox(sender=None, **_kwargs) -> None:
    """Probe the verification sandbox once at start: log it (loudly when tiers 1-3 will refuse,
    or when the operator opted out of isolation) and record it for ``/readyz``."""
    state = log_isolation(logging.getLogger("cuset.worker"))
    hostname = getattr(sender, "hostname", None) or f"worker-{os.getpid()}"
    record_sandbox(settings, hostname, state.available, state.reason, SandboxSettings().allow_unisolated)


@worker_shutdown.connect
def _forget_sandbox(sender=None, **_kwargs) -> None:
    forget_sandbox(settings, getattr(sender, "hostname", None) or f"worker-{os.getpid()}")


# Importing the modules registers their tasks with ``app``.
from worker.tasks import confidence, evals, generate, reaper, tune, validate, verify  # noqa: E402,F401
