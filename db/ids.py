"""Public ids: a type prefix and 24 random hex digits, as OpenAI's are (``ftjob-…``, ``file-…``)."""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    """A fresh id such as ``ftjob-3f2a…``; 96 random bits, so collisions are not a concern."""
    return f"{prefix}-{secrets.token_hex(12)}"
