"""Verification results cached on disk by content hash, one JSON file per result.

The key covers everything a verdict depends on: the problem, the candidate text, the tier, the
settings and ``CODE_VERSION`` (bump it whenever a tier's behaviour changes, so stale verdicts
are never served). Writes are atomic (temp file + rename), so concurrent verifiers sharing a
folder never read half a file; an unreadable entry is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.settings import VerifySettings

# 3: judge apart from the candidate, internal_error; 4: the hardened tier 2 (issue 23: kernels-off run,
# racing trials, poisoned allocations, drawn seeds, wide trials, the second size in the same process);
# 5: a timeout at the reduced sizes is checked again at smaller ones (a cached timeout may now pass);
# 6: a pass there keeps the timeout, tier 1 asks for the headers of bare calls
CODE_VERSION = "verify-6"


def cache_key(problem_code: str, candidate_text: str, tier: Tier, settings: VerifySettings) -> str:
    """sha256 (hex) of everything the verdict depends on."""
    payload = json.dumps(
        {
            "version": CODE_VERSION,
            "problem": problem_code,
            "candidate": candidate_text,
            "tier": tier.value,
            "settings": settings.model_dump(mode="json"),
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class VerifyCache:
    """A folder of cached results, ``<key[:2]>/<key>.json``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> VerifyResult | None:
        """The stored result marked ``cached=True``, or None on a miss."""
        try:
            data = self._path(key).read_text(encoding="utf-8")
            return VerifyResult.model_validate_json(data).model_copy(update={"cached": True})
        except (OSError, ValueError, ValidationError):
            return None

    def put(self, key: str, result: VerifyResult) -> None:
        """Store ``result`` (as not cached); failures to write are ignored, the cache is optional.
        An ``internal_error`` (a fault of the verifier, not of the candidate) is never stored."""
        if result.verdict is Verdict.INTERNAL_ERROR:
            return
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as f:
                f.write(result.model_copy(update={"cached": False}).model_dump_json())
            os.replace(f.name, path)
        except OSError:
            return
