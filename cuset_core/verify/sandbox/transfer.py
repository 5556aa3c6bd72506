"""Moving the caller's files into the sandbox and the command's files out of it: a tar archive of
regular files and folders each way (unpacked as data only, links and devices dropped), and
the in-memory files and pipes that carry it."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path


def _pack(folder: Path) -> bytes:
    """The caller's files in ``folder`` as a tar archive (regular files and folders)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue
            archive.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buffer.getvalue()


def unpack_files(data: bytes, folder: Path) -> None:
    """Extract a tar archive of :func:`_pack`'s kind into ``folder``: regular files and folders
    only, each inside it (no absolute names, no ``..``, no links or devices). What copies the
    command's files back, and what a command started early unpacks its late files with."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            members = [m for m in archive.getmembers() if m.isreg() or m.isdir()]
            for member in members:
                target = folder / member.name
                if target.is_symlink() or (target.exists() and target.is_dir() != member.isdir()):
                    continue
                _extract(archive, member, folder)
    except (tarfile.TarError, OSError, ValueError):
        pass  # a truncated or garbled archive: the command (or the cap) broke it; keep what came


def _extract(archive: tarfile.TarFile, member: tarfile.TarInfo, folder: Path) -> None:
    """Extract one regular file or folder of ``archive`` into ``folder``, as data only.

    tarfile's ``data`` filter (no owner, no setuid/setgid/sticky bits, no group or other write,
    nothing outside ``folder``) exists from Python 3.11.4 (and 3.8.17, 3.9.17, 3.10.12); before
    that, the same rules are checked here and the member is written with safe modes."""
    if hasattr(tarfile, "data_filter"):
        archive.extract(member, folder, filter="data")
        return
    parts = Path(member.name).parts
    if not (member.isreg() or member.isdir()) or Path(member.name).is_absolute() or ".." in parts:
        raise tarfile.TarError(f"refused archive member {member.name!r}")
    target = folder.joinpath(*parts)
    if not target.resolve().is_relative_to(folder.resolve()):
        raise tarfile.TarError(f"archive member {member.name!r} leads outside the folder")
    if member.isdir():
        target.mkdir(mode=0o755, parents=True, exist_ok=True)
        return
    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    source = archive.extractfile(member)
    if source is None:
        raise tarfile.TarError(f"archive member {member.name!r} has no data")
    mode = 0o755 if member.mode & 0o100 else 0o644
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with source, os.fdopen(descriptor, "wb") as written:
        shutil.copyfileobj(source, written)
    os.chmod(target, mode)


def _memfd(name: str, data: bytes) -> int:
    """An anonymous in-memory file holding ``data``, positioned at its start."""
    fd = os.memfd_create(name)
    view = memoryview(data)
    written = 0
    while written < len(view):
        written += os.write(fd, view[written:])
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except OSError:
        pass  # the command exited without reading all of its input
