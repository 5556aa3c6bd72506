"""Uploaded files on disk: streaming a multipart upload to a temp file, safe names and paths.

Uploads land in ``<artifacts>/files/.incoming`` while they stream in and are validated, then
move atomically (same folder tree, so ``os.replace``) to ``<artifacts>/files/<id>.<ext>``.
Nothing here holds a whole upload in memory: the request body is parsed chunk by chunk and the
file part written as it arrives, so the size limit is enforced before the upload is complete.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
import unicodedata
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, BinaryIO

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

if TYPE_CHECKING:  # the callbacks' TypedDict exists for type checkers only
    from python_multipart.multipart import MultipartCallbacks

from api.errors import APIError
from db.errors import ErrorCode

FILES_DIR = "files"
INCOMING_DIR = ".incoming"
MAX_FILENAME_CHARS = 200  # keeps the stored name well inside the 255-character column
MAX_FIELD_BYTES = 1024  # a form field besides the file (``purpose``) is a short word
MAX_PARTS = 8
_MIB = 1024 * 1024
_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")


def files_dir(artifacts: Path) -> Path:
    """The folder of stored uploads (created when missing)."""
    path = artifacts / FILES_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def incoming_dir(artifacts: Path) -> Path:
    """The folder uploads stream into before they are accepted (created when missing)."""
    path = artifacts / FILES_DIR / INCOMING_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def sanitize_filename(name: str | None, default: str = "upload") -> str:
    """The client's file name reduced to a safe base name: no folders (either slash), no
    control characters, not ``.``/``..``, at most ``MAX_FILENAME_CHARS`` characters with the
    extension kept."""
    name = unicodedata.normalize("NFC", name or "")
    name = re.split(r"[/\\]", name)[-1]
    name = _UNSAFE.sub("", name).strip().lstrip(".").strip()
    if not name:
        return default
    if len(name) > MAX_FILENAME_CHARS:
        stem, dot, ext = name.rpartition(".")
        ext = ext[:16] if dot and stem else ""
        keep = MAX_FILENAME_CHARS - (len(ext) + 1 if ext else 0)
        name = (stem if ext else name)[:keep] + (f".{ext}" if ext else "")
    return name


def stored_path(artifacts: Path, relative: str) -> Path:
    """The absolute path of a stored file's ``relative`` path, refusing anything that would
    leave the artifact root (a tampered row must not reach other files)."""
    rel = PurePosixPath(relative)
    if rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"stored path {relative!r} leaves the artifact root")
    path = (artifacts / rel).resolve()
    if not path.is_relative_to(artifacts.resolve()):
        raise ValueError(f"stored path {relative!r} leaves the artifact root")
    return path


def accept(temp: Path, artifacts: Path, file_id: str, extension: str) -> str:
    """Move a validated upload to its final place atomically; returns its path relative to
    the artifact root."""
    relative = f"{FILES_DIR}/{file_id}.{extension}"
    os.replace(temp, stored_path(artifacts, relative))
    return relative


def remove_quietly(path: Path | None) -> None:
    """Delete ``path`` if it exists (cleanup on every failure path must not raise itself)."""
    if path is not None:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass


@dataclass
class Upload:
    """A received multipart upload: the file part on disk and the small text fields."""

    path: Path | None = None  # temp file under .incoming; None when the request had no file part
    filename: str | None = None  # as the client sent it (unsanitised)
    bytes: int = 0
    fields: dict[str, str] = field(default_factory=dict)


def too_large(max_mb: int) -> APIError:
    return APIError(
        413, f"The file is larger than the limit of {max_mb} MiB.", code=ErrorCode.FILE_TOO_LARGE, param="file"
    )


async def receive_upload(
    content_type: str | None,
    content_length: str | None,
    body: AsyncIterator[bytes],
    artifacts: Path,
    max_mb: int,
    file_field: str = "file",
) -> Upload:
    """Parse a ``multipart/form-data`` body as it streams in, writing the ``file_field`` part to
    a temp file under ``files/.incoming``; other parts are text fields of at most
    ``MAX_FIELD_BYTES``. Raises ``APIError`` 413 once the file passes ``max_mb`` MiB and 400 for
    a body that is not usable multipart; the temp file is removed whenever this raises."""
    mime, options = parse_options_header(content_type or "")
    boundary = options.get(b"boundary")
    if mime != b"multipart/form-data" or not boundary:
        raise APIError(
            400,
            "Upload the file as multipart/form-data with parts 'file' and 'purpose'.",
            code=ErrorCode.INVALID_REQUEST,
            param="file",
        )
    max_bytes = max_mb * _MIB
    if content_length and content_length.isdigit() and int(content_length) > max_bytes + _MIB:
        raise too_large(max_mb)  # refuse before reading when the client announced the size
    sink = _PartSink(file_field, incoming_dir(artifacts), max_bytes)
    parser = MultipartParser(boundary, sink.callbacks())
    try:
        async for chunk in body:
            parser.write(chunk)
            if sink.error is not None:
                raise sink.error
        parser.finalize()
        if sink.error is not None:
            raise sink.error
        if not sink.ended:
            raise APIError(
                400,
                "The multipart body ended before its closing boundary.",
                code=ErrorCode.INVALID_REQUEST,
                param="file",
            )
    except APIError as error:
        sink.discard()
        if error.status == 413:
            raise too_large(max_mb) from None
        raise
    except FormParserError as error:
        sink.discard()
        raise APIError(
            400, f"Malformed multipart body: {error}", code=ErrorCode.INVALID_REQUEST, param="file"
        ) from None
    except BaseException:
        sink.discard()  # a dropped connection or a cancelled request leaves nothing behind
        raise
    finally:
        sink.close()
    return sink.upload


class _PartSink:
    """Multipart parser callbacks: the file part goes to a temp file, fields to memory."""

    def __init__(self, file_field: str, folder: Path, max_bytes: int):
        self.file_field, self.folder, self.max_bytes = file_field, folder, max_bytes
        self.upload = Upload()
        self.error: APIError | None = None
        self.ended = False
        self._parts = 0
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._headers: dict[str, bytes] = {}
        self._name: str | None = None
        self._handle: BinaryIO | None = None
        self._text = bytearray()

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": lambda data, start, end: self._header_name.extend(data[start:end]),
            "on_header_value": lambda data, start, end: self._header_value.extend(data[start:end]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
            "on_end": self._end,
        }

    def _fail(self, error: APIError) -> None:
        if self.error is None:
            self.error = error

    def _part_begin(self) -> None:
        self._parts += 1
        self._headers, self._name, self._text = {}, None, bytearray()
        if self._parts > MAX_PARTS:
            self._fail(APIError(400, f"Too many form parts (at most {MAX_PARTS}).", code=ErrorCode.INVALID_REQUEST))

    def _header_end(self) -> None:
        self._headers[self._header_name.decode("latin-1").lower()] = bytes(self._header_value)
        self._header_name.clear()
        self._header_value.clear()

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get("content-disposition", b""))
        self._name = options.get(b"name", b"").decode("utf-8", "replace")
        if self._name == self.file_field and self.error is None:
            if self.upload.path is not None:
                self._fail(APIError(400, "Send one file per upload.", code=ErrorCode.INVALID_REQUEST, param="file"))
                return
            filename = options.get(b"filename")
            self.upload.filename = filename.decode("utf-8", "replace") if filename is not None else None
            fd, name = tempfile.mkstemp(dir=self.folder, suffix=".part")
            self.upload.path = Path(name)
            self._handle = os.fdopen(fd, "wb")

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self.error is not None:
            return
        if self._handle is not None and self._name == self.file_field:
            self.upload.bytes += end - start
            if self.upload.bytes > self.max_bytes:
                self._fail(APIError(413, "too large", code=ErrorCode.FILE_TOO_LARGE, param="file"))
                return
            try:
                self._handle.write(data[start:end])
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                self._fail(
                    APIError(
                        507,
                        "The server has no space left to store this upload; nothing was kept.",
                        code=ErrorCode.INSUFFICIENT_STORAGE,
                        param="file",
                    )
                )
        else:
            self._text.extend(data[start:end])
            if len(self._text) > MAX_FIELD_BYTES:
                self._fail(
                    APIError(
                        400,
                        f"Form field '{self._name}' is longer than {MAX_FIELD_BYTES} bytes.",
                        code=ErrorCode.INVALID_VALUE,
                        param=self._name,
                    )
                )

    def _part_end(self) -> None:
        if self._handle is not None and self._name == self.file_field:
            self._handle.close()
            self._handle = None
        elif self._name and self.error is None:
            self.upload.fields[self._name] = self._text.decode("utf-8", "replace")

    def _end(self) -> None:
        self.ended = True

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def discard(self) -> None:
        """Close and delete the temp file (the upload failed)."""
        self.close()
        remove_quietly(self.upload.path)
        self.upload.path = None
