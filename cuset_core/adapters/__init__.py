"""LoRA adapters this project tuned and ships inside the package, loadable by name.

A shipped adapter is a folder ``cuset_core/adapters/<name>/`` holding ``adapter_config.json``,
``adapter_model.safetensors`` (float16, a few MB), ``cuset_base.json`` (its base model spec, a
name such as ``smollm2-135m``, never a path of the machine it was trained on) and ``README.md``
(its model card: training command and evaluation figures). Its name is then a model spec like
any other (``cuset generate --model cuset-ew-135m``, ``cuset eval``, the service's ``model``).

``SHIPPED`` lists the names the project knows, so a name whose files are missing (a checkout
without the weights) fails with what is missing instead of "model not found".
:func:`cuset_core.training.ship.ship_adapter` puts a finished run's adapter into that place
(``cuset ship-adapter``). This module imports nothing of the project: the model loader looks
names up here.
"""

from __future__ import annotations

from pathlib import Path

BASE_MARKER = "cuset_base.json"  # in every adapter folder, tuned or shipped: which base model it needs
ADAPTERS_ROOT = Path(__file__).resolve().parent
CARD = "README.md"
SHIPPED_FILES = ("adapter_config.json", "adapter_model.safetensors", BASE_MARKER, CARD)

SHIPPED: dict[str, str] = {
    "cuset-ew-135m": "SmolLM2-135M-Instruct with a LoRA adapter tuned on the elementwise kernel family",
}
"""Shipped adapter names and what each is."""


def is_shipped_name(spec: object) -> bool:
    """Whether ``spec`` is the name of an adapter the project ships (present or not)."""
    return isinstance(spec, str) and spec in SHIPPED


def missing_files(name: str, root: Path | None = None) -> list[str]:
    """The files of shipped adapter ``name`` that are not in its folder (empty when complete)."""
    folder = (root or ADAPTERS_ROOT) / name
    return [file for file in SHIPPED_FILES if not (folder / file).is_file()]


class AdapterMissingError(LookupError):
    """A shipped adapter name is unknown, or its files are not all in this installation."""


def shipped_adapter_dir(name: str, root: Path | None = None) -> Path:
    """The folder of shipped adapter ``name``; AdapterMissingError naming the missing files when
    the name is unknown or its files are not all there."""
    if name not in SHIPPED:
        raise AdapterMissingError(f"no shipped adapter named {name!r} (shipped: {', '.join(sorted(SHIPPED))})")
    folder = (root or ADAPTERS_ROOT) / name
    missing = missing_files(name, root)
    if missing:
        raise AdapterMissingError(
            f"shipped adapter {name!r} is not in this installation: {folder} lacks {', '.join(missing)} "
            f"(put a trained adapter there with `cuset ship-adapter RUN --name {name} --card CARD.md`)"
        )
    return folder


def available_adapters(root: Path | None = None) -> list[str]:
    """Names of the shipped adapters whose files are all present, sorted."""
    return sorted(name for name in SHIPPED if not missing_files(name, root))
