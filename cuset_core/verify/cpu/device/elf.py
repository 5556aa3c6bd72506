"""The two things the device process reads from a candidate's extension library (64-bit
little-endian ELF, what g++ builds here): where its launch entries are, and a copy of it that
loads without running any of its code.

The host sends a launch as an offset into the library; the device process calls only offsets
that are ``cuset::detail::remote_entry`` instantiations (:func:`launch_entries`), so no host
function of the candidate ever runs there. Its copy is loaded with no initialisers and no
finalisers (:func:`without_initialisers`): the candidate's static constructors (host code) run in
the host process only.
"""

from __future__ import annotations

import struct

_ENTRY_PREFIX = b"_ZN5cuset6detail12remote_entry"
_SHT_SYMTAB = 2
_STT_FUNC = 2
# Dynamic-section tags of the code a loader runs: DT_INIT, DT_FINI, their arrays' sizes.
_DT_INIT, _DT_FINI, _DT_INIT_ARRAYSZ, _DT_FINI_ARRAYSZ, _DT_DEBUG = 12, 13, 27, 28, 21
_PT_LOAD, _PT_DYNAMIC = 1, 2


class ElfError(ValueError):
    """Not a library this tier builds."""


def _check(data: bytes) -> None:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ElfError("not a 64-bit little-endian ELF file")


def launch_entries(data: bytes) -> set[int]:
    """Offsets (from the library's load address) of its ``remote_entry`` functions, from .symtab."""
    _check(data)
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    entries = set()
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != _SHT_SYMTAB or not entsize:
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, entsize):
            name, info, _other, _shndx, value, _size = struct.unpack_from("<IBBHQQ", data, at)
            if info & 0xF != _STT_FUNC or not value:
                continue
            end = data.index(b"\0", strings + name)
            if data[strings + name : end].startswith(_ENTRY_PREFIX):
                entries.add(value)
    return entries


def without_initialisers(data: bytes) -> bytes:
    """A copy of the library whose load runs none of its code: DT_INIT and DT_FINI become DT_DEBUG
    (which loaders ignore) and the init and fini arrays are emptied."""
    _check(data)
    copy = bytearray(data)
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        header = phoff + i * phentsize
        (kind,) = struct.unpack_from("<I", data, header)
        if kind != _PT_DYNAMIC:
            continue
        (offset,) = struct.unpack_from("<Q", data, header + 8)
        (size,) = struct.unpack_from("<Q", data, header + 32)
        for at in range(offset, offset + size, 16):
            tag, _value = struct.unpack_from("<qQ", data, at)
            if tag in (_DT_INIT, _DT_FINI):
                struct.pack_into("<qQ", copy, at, _DT_DEBUG, 0)
            elif tag in (_DT_INIT_ARRAYSZ, _DT_FINI_ARRAYSZ):
                struct.pack_into("<qQ", copy, at, tag, 0)
        return bytes(copy)
    raise ElfError("no dynamic section: not a shared library")


def mapped_size(data: bytes) -> int:
    """Bytes from the library's load address to the end of its last loaded segment, zero-filled
    .bss included: the span a symbol of the library (a ``__device__`` variable) lies in."""
    _check(data)
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    end = 0
    for i in range(phnum):
        header = phoff + i * phentsize
        (kind,) = struct.unpack_from("<I", data, header)
        if kind == _PT_LOAD:
            (vaddr,) = struct.unpack_from("<Q", data, header + 16)
            (memsz,) = struct.unpack_from("<Q", data, header + 40)
            end = max(end, vaddr + memsz)
    return end
