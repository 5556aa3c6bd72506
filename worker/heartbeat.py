"""A heartbeat for long tasks: a thread stamps ``heartbeat_at`` on the task's row while it runs,
so the reaper can tell a busy worker from a dead one."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import update

from db.session import session_scope

log = logging.getLogger(__name__)


@contextmanager
def heartbeat(url: str, model, row_id: str, interval_s: float) -> Iterator[None]:
    """Stamp ``model.heartbeat_at`` of row ``row_id`` now and every ``interval_s`` seconds until
    the block ends. A failed stamp (database briefly down) is logged and retried next beat."""
    stop = threading.Event()

    def beat() -> None:
        while True:
            try:
                with session_scope(url) as session:
                    session.execute(update(model).where(model.id == row_id).values(heartbeat_at=time.time()))
            except Exception:  # noqa: BLE001 - the next beat retries
                log.warning("heartbeat of %s failed", row_id, exc_info=True)
            if stop.wait(interval_s):
                return

    thread = threading.Thread(target=beat, name=f"heartbeat-{row_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=interval_s + 5)
