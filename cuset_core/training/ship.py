"""Ship a finished LoRA run as one of the project's adapters (``cuset ship-adapter``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cuset_core import adapters
from cuset_core.adapters import CARD
from cuset_core.models import read_base_spec, recorded_prompt_style, write_base_spec
from cuset_core.training.export import export_adapter, model_files

MAX_SHIPPED_MB = 20.0  # MiB of a shipped folder: it lives in git and in the wheel


class ShipError(ValueError):
    """An adapter cannot be shipped as asked; the message says why."""


def folder_mib(folder: Path) -> float:
    """Total size of the files directly in ``folder``, MiB."""
    return sum(path.stat().st_size for path in folder.iterdir() if path.is_file()) / 2**20


def ship_adapter(
    run_dir: Path,
    name: str,
    *,
    card: Path | None = None,
    base_model: str | None = None,
    root: Path | None = None,
    max_mib: float = MAX_SHIPPED_MB,
) -> Path:
    """Copy a finished LoRA run's adapter into the shipped folder of ``name``, weights in float16.

    ``card`` is the model card (README.md); without it the folder's current card is kept, and
    there must be one. ``base_model`` defaults to the base spec the run recorded. The folder is
    written beside its place and swapped in only when complete and at most ``max_mib`` MiB.
    Returns the folder. Raises ShipError (or ExportError for a run without an adapter).
    """
    import torch

    if name not in adapters.SHIPPED:
        raise ShipError(f"{name!r} is not a shipped adapter name; add it to cuset_core.adapters.SHIPPED first")
    files = model_files(run_dir)
    if files[0].name != "adapter_config.json":
        raise ShipError(f"{run_dir}: a full fine-tuned model, not a LoRA adapter; only adapters are shipped")
    dest = (root or adapters.ADAPTERS_ROOT) / name
    card_text = (card or dest / CARD).read_text(encoding="utf-8") if (card or dest / CARD).is_file() else None
    if card_text is None:
        raise ShipError(f"no model card: give one (training command, evaluation figures) as {card or dest / CARD}")
    base = base_model or read_base_spec(Path(run_dir))
    partial = dest.with_name(f".{name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        export_adapter(Path(run_dir), partial, base_model=base, dtype=torch.float16)
        write_base_spec(partial, base, recorded_prompt_style(Path(run_dir)))
        (partial / CARD).write_text(card_text, encoding="utf-8")
        for path in partial.iterdir():
            path.chmod(0o644)  # package data: readable by every user the package serves (exports write 0600)
        size = folder_mib(partial)
        if size > max_mib:
            raise ShipError(f"{name}: {size:.1f} MiB in float16, over the {max_mib:g} MiB a shipped adapter may take")
        old = dest.with_name(f".{name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if dest.exists():
            os.replace(dest, old)
        os.replace(partial, dest)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return dest
