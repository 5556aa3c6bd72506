"""LoRA adapters this project tuned and ships inside the package, loadable by name.

A shipped adapter is a folder ``cuset_core/adapters/<name>/`` holding ``adapter_config.json``,
``adapter_model.safetensors`` (float16, a few MB), ``cuset_base.json`` (its base model spec, a
name such as ``smollm2-135m``, never a path of the machine it was trained on) and ``README.md``
(its model card: training command and evaluation figures). Its name is then a model spec like
any other (``cuset generate --model cuset-ew-135m``, ``cuset eval``, the service's ``model``).

``SHIPPED`` lists the names the project knows, so a name whose files are missing (a checkout
without the weights) fails with what is missing instead of "model not found". ``ship_adapter``
puts a finished run's adapter into that place (``cuset ship-adapter``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cuset_core.models import BASE_MARKER, ModelNotFoundError, read_base_spec, write_base_spec

ADAPTERS_ROOT = Path(__file__).resolve().parent
CARD = "README.md"
SHIPPED_FILES = ("adapter_config.json", "adapter_model.safetensors", BASE_MARKER, CARD)
MAX_SHIPPED_MB = 20.0  # MiB of a shipped folder: it lives in git and in the wheel

SHIPPED: dict[str, str] = {
    "cuset-ew-135m": "SmolLM2-135M-Instruct with a LoRA adapter tuned on the elementwise kernel family",
}
"""Shipped adapter names and what each is."""


class ShipError(ValueError):
    """An adapter cannot be shipped as asked; the message says why."""


def is_shipped_name(spec: object) -> bool:
    """Whether ``spec`` is the name of an adapter the project ships (present or not)."""
    return isinstance(spec, str) and spec in SHIPPED


def missing_files(name: str, root: Path | None = None) -> list[str]:
    """The files of shipped adapter ``name`` that are not in its folder (empty when complete)."""
    folder = (root or ADAPTERS_ROOT) / name
    return [file for file in SHIPPED_FILES if not (folder / file).is_file()]


def shipped_adapter_dir(name: str, root: Path | None = None) -> Path:
    """The folder of shipped adapter ``name``; ModelNotFoundError naming the missing files when
    the name is unknown or its files are not all there."""
    if name not in SHIPPED:
        raise ModelNotFoundError(f"no shipped adapter named {name!r} (shipped: {', '.join(sorted(SHIPPED))})")
    folder = (root or ADAPTERS_ROOT) / name
    missing = missing_files(name, root)
    if missing:
        raise ModelNotFoundError(
            f"shipped adapter {name!r} is not in this installation: {folder} lacks {', '.join(missing)} "
            f"(put a trained adapter there with `cuset ship-adapter RUN --name {name} --card CARD.md`)"
        )
    return folder


def available_adapters(root: Path | None = None) -> list[str]:
    """Names of the shipped adapters whose files are all present, sorted."""
    return sorted(name for name in SHIPPED if not missing_files(name, root))


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

    from cuset_core.training.export import export_adapter, model_files

    if name not in SHIPPED:
        raise ShipError(f"{name!r} is not a shipped adapter name; add it to cuset_core.adapters.SHIPPED first")
    files = model_files(run_dir)
    if files[0].name != "adapter_config.json":
        raise ShipError(f"{run_dir}: a full fine-tuned model, not a LoRA adapter; only adapters are shipped")
    dest = (root or ADAPTERS_ROOT) / name
    card_text = (card or dest / CARD).read_text(encoding="utf-8") if (card or dest / CARD).is_file() else None
    if card_text is None:
        raise ShipError(f"no model card: give one (training command, evaluation figures) as {card or dest / CARD}")
    base = base_model or read_base_spec(Path(run_dir))
    partial = dest.with_name(f".{name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        export_adapter(Path(run_dir), partial, base_model=base, dtype=torch.float16)
        write_base_spec(partial, base)
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
