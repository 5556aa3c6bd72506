"""The worker's Celery app: ``celery -A worker.app worker -Q gpu`` (or ``-Q cpu``)."""

from __future__ import annotations

from db.dispatch import make_celery
from db.settings import get_settings

app = make_celery(get_settings())
app.autodiscover_tasks(["worker"], related_name="tasks", force=True)
