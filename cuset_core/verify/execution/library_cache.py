"""Compiled candidate extensions kept by what they were compiled from, so one source is built once.

Most of a tier-2 check is g++ compiling the candidate's extension (docs/verification.md,
"Throughput"), and the same extension recurs: the samples and repairs of one problem often share
it, a re-verification with other settings repeats it, and the security suite builds one kernel
under many attacks. The key is computed on the trusted side from the translation unit and the
precompiled preludes it was compiled against (their folder names hold the toolchain's hash), so
an entry is exactly what g++ made of those sources with that toolchain; only the judge writes
entries, copied from a build side whose sources it derived itself. A candidate's *process* is
never reused: only the bytes of its library are.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ENTRY_CAP_BYTES = 512 << 20  # larger libraries are rebuilt rather than kept


def library_key(unit_digest: str, preludes: Iterable[str]) -> str:
    """The cache key of one library: sha256 (hex) of its translation unit's digest and the
    names of the prelude folders it may be compiled against (each names its toolchain hash)."""
    digest = hashlib.sha256(unit_digest.encode())
    for prelude in preludes:
        digest.update(b"\0" + Path(prelude).name.encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class LibraryCache:
    """A folder of libraries, ``<key[:2]>/<key>.so``; every failure to read or write is a miss."""

    folder: Path

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.so"

    def get(self, key: str) -> bytes | None:
        """The library stored under ``key``, or None."""
        try:
            return self._path(key).read_bytes()
        except OSError:
            return None

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` atomically (temp file + rename), so concurrent verifiers
        sharing the folder never load half a library."""
        if len(data) > ENTRY_CAP_BYTES:
            return
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("wb", dir=path.parent, suffix=".tmp", delete=False) as file:
                file.write(data)
            os.chmod(file.name, 0o644)  # the sandbox's uid reads the copy, never this file
            os.replace(file.name, path)
        except OSError:
            return
