"""Data across processes: values as safetensors, a side's report as bounded JSON, read by the judge under caps.

Data crosses processes as safetensors (data only, never pickle); non-tensor values (init
arguments, scalars) travel as JSON in the file's metadata (:func:`save_values`,
:func:`load_values`). The judge reads what a sandboxed side left with ``O_NOFOLLOW`` as regular
files under a size cap (:func:`read_untrusted`, :func:`read_report`); a file that breaks a rule
is an :class:`UntrustedFileError`. torch is imported where it is used.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from cuset_core.verify.execution.contracts import (
    HEADER_CAP_BYTES,
    REPORT_CAP_BYTES,
    REPORT_FILE,
    BuildReport,
    CandidateReport,
    ReferenceReport,
    clip,
)


class UntrustedFileError(ValueError):
    """A file from a sandboxed side is not what the judge accepts (link, FIFO, oversize, malformed)."""


def _encode(value: Any, key: str, tensors: dict[str, Any], copy: bool = True) -> Any:
    """JSON description of ``value``; its tensors go into ``tensors`` under keys from ``key`` (copies,
    as safetensors refuses tensors that share memory, unless ``copy`` is false)."""
    import torch

    if isinstance(value, torch.Tensor):
        tensors[key] = value.detach().to("cpu").contiguous().clone() if copy else value
        return {"t": key}
    if isinstance(value, (tuple, list)):
        items = [_encode(item, f"{key}.{i}", tensors, copy) for i, item in enumerate(value)]
        return {"tuple" if isinstance(value, tuple) else "list": items}
    if isinstance(value, dict):
        return {"dict": {str(k): _encode(item, f"{key}.{k}", tensors, copy) for k, item in value.items()}}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"v": value}
    return {"repr": clip(repr(value), 200)}


def _decode(spec: Any, tensors: dict[str, Any]) -> Any:
    import torch

    if not isinstance(spec, dict) or len(spec) != 1:
        raise UntrustedFileError("malformed value description")
    ((kind, body),) = spec.items()
    if kind == "t":
        if not isinstance(body, str) or body not in tensors:
            raise UntrustedFileError("a tensor the layout names is missing")
        return tensors[body]
    if kind in ("tuple", "list") and isinstance(body, list):
        items = [_decode(item, tensors) for item in body]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict" and isinstance(body, dict):
        return {k: _decode(item, tensors) for k, item in body.items()}
    if kind == "dtype" and isinstance(body, str) and isinstance(getattr(torch, body, None), torch.dtype):
        return getattr(torch, body)
    if kind == "v" and (body is None or isinstance(body, (bool, int, float, str))):
        return body
    if kind == "repr" and isinstance(body, str):
        return _Opaque(clip(body, 200))
    raise UntrustedFileError("malformed value description")


@dataclass(frozen=True)
class _Opaque:
    """A value that could not cross processes as data: only its ``repr`` did."""

    text: str


def save_values(path: Path, groups: dict[str, Any], copy: bool = True) -> None:
    """Write named groups of values (tensors, numbers, nested lists/tuples) as one safetensors file;
    ``copy=False`` for contiguous CPU tensors that share no memory (no copy allocated to write them)."""
    from safetensors.torch import save_file

    tensors: dict[str, Any] = {}
    layout = {name: _encode(value, name, tensors, copy) for name, value in groups.items()}
    partial = path.with_name(path.name + ".tmp")
    save_file(tensors, str(partial), metadata={"cuset": json.dumps(layout)})
    partial.replace(path)


def load_values(data: bytes) -> dict[str, Any]:
    """The groups of a :func:`save_values` file given as bytes; ``UntrustedFileError`` if malformed."""
    from safetensors.torch import load

    if len(data) < 8:
        raise UntrustedFileError("too short for a safetensors file")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > min(HEADER_CAP_BYTES, len(data) - 8):
        raise UntrustedFileError(f"safetensors header of {header_len} bytes")
    try:
        header = json.loads(data[8 : 8 + header_len])
        layout = json.loads(header["__metadata__"]["cuset"])
        tensors = load(data)
    except Exception as exc:  # noqa: BLE001 - any parse failure is a malformed file
        raise UntrustedFileError(f"not a readable safetensors file ({type(exc).__name__})") from exc
    if not isinstance(layout, dict):
        raise UntrustedFileError("malformed layout")
    return {name: _decode(spec, tensors) for name, spec in layout.items()}


def read_untrusted(folder: Path, name: str, cap: int) -> bytes | None:
    """The bytes of ``folder/name`` if it is a regular file of at most ``cap`` bytes; None if absent.

    Opened with ``O_NOFOLLOW`` relative to the folder (itself opened without following links)
    and ``O_NONBLOCK``, so a symlink, a FIFO or a device never makes the judge read something
    else or wait; ``UntrustedFileError`` says which rule the file broke.
    """
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise UntrustedFileError(f"{folder.name}/ cannot be opened as a folder: {exc.strerror}") from exc
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        what = "a symbolic link" if os.path.islink(folder / name) else exc.strerror
        raise UntrustedFileError(f"{name} is {what}, not a regular file") from exc
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFileError(f"{name} is not a regular file")
        if info.st_size > cap:
            raise UntrustedFileError(f"{name} holds {info.st_size} bytes, over the cap of {cap}")
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 20, cap + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise UntrustedFileError(f"{name} grew past the cap of {cap} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


ReportT = TypeVar("ReportT", CandidateReport, ReferenceReport, BuildReport)


def read_report(folder: Path, model: type[ReportT], name: str = REPORT_FILE) -> ReportT | None:
    """A side's ``report.json`` (or the report ``name``; capped) as ``model``; None when it left none.

    ``UntrustedFileError`` with a reason of the judge's own (never the file's text) when the
    file is not such a report: not a JSON object, not JSON, nested too deep, a field out of bounds."""
    data = read_untrusted(folder, name, REPORT_CAP_BYTES)
    if data is None:
        return None
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        errors = exc.errors()
        if any(error["type"] == "model_type" and not error["loc"] for error in errors):
            raise UntrustedFileError(f"{name} is not a JSON object") from exc
        fields = {str(error["loc"][0]) for error in errors if error["loc"]} & set(model.model_fields)
        where = f" (field {', '.join(sorted(fields))})" if fields else ""
        raise UntrustedFileError(f"{name} is not a valid report{where}") from exc
