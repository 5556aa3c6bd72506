"""The worker's Celery app: ``celery -A worker.app worker -Q gpu`` (or ``-Q cpu``)."""

from __future__ import annotations

import os

from cuset_core.verify.sandbox import HIDE_ENV
from db.dispatch import make_celery
from db.settings import get_settings

settings = get_settings()
app = make_celery(settings)
# Candidate kernels run in the sandbox; it also hides what this service keeps on disk from them.
os.environ[HIDE_ENV] = os.pathsep.join(str(path) for path in settings.sandbox_hidden_paths())

# Importing the modules registers their tasks with ``app``.
from worker.tasks import confidence, evals, generate, reaper, tune, validate, verify  # noqa: E402,F401
