"""The worker's Celery app: ``celery -A worker.app worker -Q gpu`` (or ``-Q cpu``)."""

from __future__ import annotations

from db.dispatch import make_celery
from db.settings import get_settings

app = make_celery(get_settings())

# Importing the modules registers their tasks with ``app``.
from worker.tasks import confidence, evals, generate, reaper, tune, validate, verify  # noqa: E402,F401
