"""What each worker found at start-up, and found again since, about the verification sandbox,
kept as a small JSON file per worker under the artifact root (shared by the API and the workers,
hidden from candidates), so ``/readyz`` can report it without a migration or a broadcast to the
workers."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from db.settings import Settings

_FOLDER = "workers"


def _folder(settings: Settings) -> Path:
    return settings.artifacts / _FOLDER


def _file_name(hostname: str) -> str:
    return "".join(c if c.isalnum() or c in "@.-_" else "_" for c in hostname) + ".json"


def record_sandbox(
    settings: Settings, hostname: str, isolated: bool, reason: str, allow_unisolated: bool, tier2: str | None = None
) -> None:
    """Write (atomically) what the worker ``hostname`` found when it started or probed again.

    ``tier2``: why tier 2's side does not run in the sandbox the worker could set up (its
    interpreter importing torch failed), None when it runs or was not tried; the state is then
    ``not ready`` with that reason."""
    folder = _folder(settings)
    folder.mkdir(parents=True, exist_ok=True)
    state = "isolated" if isolated else "unisolated (operator opt-out)" if allow_unisolated else "refusing"
    if tier2 is not None and state != "refusing":
        state, reason = "not ready", tier2
    entry = {"state": state, "reason": reason, "pid": os.getpid(), "checked_at": int(time.time())}
    name = _file_name(hostname)
    partial = folder / f".{name}.tmp"
    partial.write_text(json.dumps(entry))
    partial.replace(folder / name)


def forget_sandbox(settings: Settings, hostname: str) -> None:
    """Remove the worker's entry when it shuts down cleanly; an entry that another process of the
    same name wrote since is left alone."""
    path = _folder(settings) / _file_name(hostname)
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink(missing_ok=True)
    except (OSError, ValueError):
        pass


def sandbox_states(settings: Settings) -> dict[str, dict]:
    """Worker hostname -> its entry (``state``: isolated | unisolated (operator opt-out) |
    refusing | not ready; ``reason``; ``pid``; ``checked_at``, Unix seconds)."""
    states = {}
    for path in sorted(_folder(settings).glob("*.json")):
        try:
            states[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return states
