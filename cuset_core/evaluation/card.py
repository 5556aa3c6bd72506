"""The evaluation settings an adapter's card reports its figures under, recorded beside it in
``cuset_base.json`` as ``"evaluation": {"tier", "temperature", "top_p", "prompt_style",
"max_new_tokens"}`` (the shipped cuset-ew-135m: tier cpu, temperature 0.7, top-p 0.95, compact,
768). ``cuset eval`` and ``POST /v1/evals`` take each one the user did not set from here, so an
eval of a shipped adapter measures what its card measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cuset_core.adapters import ADAPTERS_ROOT, BASE_MARKER, is_shipped_name

EVAL_KEYS = ("tier", "temperature", "top_p", "prompt_style", "max_new_tokens")
CARD = "unset: the adapter card's evaluation setting where it recorded one"  # how each key's help says so


def recorded_eval_settings(spec: str | Path | None) -> dict[str, Any]:
    """The evaluation settings recorded beside the adapter ``spec`` names (only the known keys);
    {} for a base model, an endpoint, an adapter without a record or a spec that names nothing.
    Reads one small file; never raises."""
    if spec is None:
        return {}
    try:
        folder = ADAPTERS_ROOT / str(spec) if is_shipped_name(spec) else Path(spec).expanduser()
        recorded = json.loads((folder / BASE_MARKER).read_text()).get("evaluation") or {}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}
    if not isinstance(recorded, dict):
        return {}
    return {key: recorded[key] for key in EVAL_KEYS if recorded.get(key) is not None}
