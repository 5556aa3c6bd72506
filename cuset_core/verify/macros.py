"""Preprocessor tests that would let tier 2 run other device code than tier 1 compiled.

Tier 1 compiles the CUDA sources with nvcc's device pass; tier 2 builds them with g++ against
the CPU runtime after defining the macros of that device pass (``cpu.build.DEVICE_PASS_MACROS``:
``__CUDACC__``, ``__CUDA_ARCH__``, ...). What still differs between the two builds are names
only the verifier's own headers or flags define, and tier 0 rejects a source that tests them:

- anywhere in the code: the verifier's own names (``CUSET_*`` macros and header guards of the
  runtime and of tier 1's torch stand-ins, ``cuset::`` functions), the macros that follow the
  compiler flags of one tier only (``__OPTIMIZE__``, ``__NO_INLINE__``, ``__PIC__``...), and
  ``__has_include``, whose answer depends on each tier's include folders;
- in a conditional (``#if``, ``#ifdef``, ``#elif``... or ``defined(...)``): names the runtime
  defines as macros where nvcc's headers do not, or not always (``CUDART_*`` constants, the
  ``C10_CUDA_CHECK`` family, ``__noinline__``), and the guards of system and standard-library
  headers (``_SYS_MMAN_H``, ``_GLIBCXX_THREAD``, ``__cpp_lib_*``): which of those are defined
  depends on what each tier's own headers include. Guards the candidate defines itself are its
  own include guards and are fine.

Everything else is the candidate's to test: ``#ifdef __CUDA_ARCH__`` and
``#if __CUDACC_VER_MAJOR__ >= 12`` see the same values in both builds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from cuset_core.verify.preprocessor import joined_code

_ANYWHERE = re.compile(r"(?i:cuset\w*)|__OPTIMIZE(?:_SIZE)?__|__NO_INLINE__|__(?:PIC|pic|PIE|pie)__|__has_include\w*")
_IN_CONDITIONALS = re.compile(r"CUDART_(?!VERSION\Z)\w+|C10_CUDA_\w+|AT_CUDA_CHECK|__noinline__")
_HEADER_GUARD = re.compile(r"_\w*_(?:H|H_|H__|HPP|INCLUDED|defined)|_GLIBCXX_\w+|__cpp_lib_\w+")
_CONDITIONAL = re.compile(
    r"^[ \t]*(?:#|%:)[ \t]*(?:if|ifdef|ifndef|elif|elifdef|elifndef)\b(?:\\\n|[^\n])*", re.MULTILINE
)
_DEFINED = re.compile(r"\bdefined\s*\(?\s*([A-Za-z_]\w*)")
_DEFINE = re.compile(r"^[ \t]*(?:#|%:)[ \t]*define[ \t]+([A-Za-z_]\w*)", re.MULTILINE)
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_DIFFERS = "which tiers 1 and 2 do not see alike: tier 2 would run other device code than tier 1 compiled"


@dataclass(frozen=True)
class Fingerprint:
    """A test of the verifier's build: where it is in the source (``offset``) and what it tests."""

    offset: int
    name: str
    reason: str


def find_fingerprint(source: str) -> Fingerprint | None:
    """The first place where ``source`` tests a name that tiers 1 and 2 define differently.

    Its code is read as the compiler reads it (``preprocessor.joined_code``): comments and
    literals do not count, ``1'0`` is a number and a name split by a backslash-newline is whole."""
    code = joined_code(source)
    found = [hit for hit in (_anywhere(code.text), _in_conditionals(code.text)) if hit is not None]
    if not found:
        return None
    first = min(found, key=lambda hit: hit.offset)
    return replace(first, offset=code.source_offset(first.offset))


def _anywhere(code: str) -> Fingerprint | None:
    for match in _IDENTIFIER.finditer(code):
        name = match.group(0)
        if _ANYWHERE.fullmatch(name):
            return Fingerprint(match.start(), name, f"uses {name}, {_DIFFERS}")
    return None


def _in_conditionals(code: str) -> Fingerprint | None:
    own = set(_DEFINE.findall(code))
    hits = [(m.start() + offset, name) for m in _CONDITIONAL.finditer(code) for offset, name in _tested(m.group(0))]
    hits += [(m.start(1), m.group(1)) for m in _DEFINED.finditer(code)]
    for offset, name in sorted(hits):
        if _IN_CONDITIONALS.fullmatch(name) or (_HEADER_GUARD.fullmatch(name) and name not in own):
            return Fingerprint(offset, name, f"conditional compilation on {name}, {_DIFFERS}")
    return None


def _tested(directive: str) -> list[tuple[int, str]]:
    """(offset in the directive, name) of every name a conditional directive tests."""
    names = [(m.start(), m.group(0)) for m in _IDENTIFIER.finditer(directive)]
    return [(offset, name) for offset, name in names[1:] if name != "defined"]  # names[0]: the directive
