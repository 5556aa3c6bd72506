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

One program (issue 47, item 3): beyond those, a conditional may test only names the candidate
defines itself (above the test, or the guard shape ``#ifndef X`` / ``#define X`` of a name no
header of nvcc's device pass defines, or a fallback ``#define`` alone in its group) and the short
``ALLOWLIST`` of names both builds define identically (``#ifdef __CUDA_ARCH__``,
``#if __CUDACC_VER_MAJOR__ >= 12``, ``__cplusplus``) or neither defines (``USE_ROCM``). Anything
else (a CUDA header's guard, ``_GLIBCXX_RELEASE``, ``__GNUC__``) is refused with its line.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, replace
from importlib import resources

from cuset_core.verify.source.preprocessor import NVCC_DEVICE_PASS, joined_code

_ANYWHERE = re.compile(r"(?i:cuset\w*)|__OPTIMIZE(?:_SIZE)?__|__NO_INLINE__|__(?:PIC|pic|PIE|pie)__|__has_include\w*")
_IN_CONDITIONALS = re.compile(r"CUDART_(?!VERSION\Z)\w+|C10_CUDA_\w+|AT_CUDA_CHECK|__noinline__")
_CONDITIONALS = frozenset({"if", "ifdef", "ifndef", "elif", "elifdef", "elifndef"})
_DIRECTIVE_LINE = re.compile(r"[ \t]*(?:#|%:)[ \t]*([A-Za-z_]\w*)")
_DEFINE_LINE = re.compile(r"[ \t]*(?:#|%:)[ \t]*define[ \t]+([A-Za-z_]\w*)")
_GUARD_TEST = re.compile(
    r"[ \t]*(?:#|%:)[ \t]*(?:ifndef[ \t]+([A-Za-z_]\w*)|if[ \t]*![ \t]*defined[ \t]*\(?[ \t]*([A-Za-z_]\w*)[ \t]*\)?)[ \t]*$"
)
_KEYWORDS = frozenset({"true", "false", "and", "or", "not", "bitand", "bitor", "xor", "compl", "not_eq"})
_DEFINED = re.compile(r"\bdefined\s*\(?\s*([A-Za-z_]\w*)")
_IDENTIFIER = re.compile(r"(?<![\w.$])[A-Za-z_]\w*")
_DIFFERS = "which tiers 1 and 2 do not see alike: tier 2 would run other device code than tier 1 compiled"
_NOT_OWN = (
    "a macro the candidate does not define and nvcc's device pass and tier 2 may define differently: "
    "tier 2 would run other device code than tier 1 compiled"
)
# Names a conditional may test although the candidate does not define them: defined identically by
# nvcc's device pass and tier 2 (the device-pass table both share, the C++ standard both use), or
# by neither (other compilers and platforms). Derived by comparing ``nvcc -E -Xcompiler -dM`` with
# tier 2's g++ (tests/security/test_one_program_and_blame.py).
ALLOWLIST: frozenset[str] = frozenset(
    {name for name, _ in NVCC_DEVICE_PASS}
    | {"__cplusplus"}
    | {"__CUDACC_RTC__", "__HIPCC__", "__HIP__", "__HIP_PLATFORM_AMD__", "__HIP_PLATFORM_HCC__"}
    | {"__HIP_DEVICE_COMPILE__", "USE_ROCM", "__clang__", "_MSC_VER", "_WIN32", "_WIN64", "__APPLE__"}
)


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
    """The first conditional that tests a name tiers 1 and 2 may not define alike (one program).

    A name tested in ``#if``/``#ifdef``/``#elif``... or by ``defined`` passes only when it is on
    :data:`ALLOWLIST`, when the candidate ``#define``d or ``#undef``ed it above (outside a fallback
    group, below), or when the test is the guard shape ``#ifndef X`` / ``#define X``: an include
    guard of a name no header of nvcc's device pass defines (:func:`header_macros`), or a fallback
    whose group holds that ``#define`` alone (``#ifndef M_PI`` / ``#define M_PI 3.14...``)."""
    lines = code.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    own: set[str] = set()
    fallbacks: list[str | None] = []  # per open group: the name of a fallback group, else None
    for index, line in enumerate(lines):
        directive = _DIRECTIVE_LINE.match(line)
        keyword = directive.group(1) if directive else ""
        if keyword in ("define", "undef"):
            defined = _IDENTIFIER.search(line, directive.end()) if directive else None
            if defined is not None and not (fallbacks and fallbacks[-1] == defined.group(0)):
                own.add(defined.group(0))
            hits = [(m.start(1), m.group(1)) for m in _DEFINED.finditer(line)]
        elif keyword in _CONDITIONALS:
            guarded = _guard(line, lines[index + 1 :]) if keyword in ("if", "ifndef") else None
            hits = [] if guarded is not None else list(_tested(line))
            if guarded is not None:
                guard, alone = guarded
                if (not alone and guard in header_macros()) or _IN_CONDITIONALS.fullmatch(guard):
                    hits = [(line.index(guard, directive.end() if directive else 0), guard)]
            if keyword in ("if", "ifdef", "ifndef"):
                fallbacks.append(guarded[0] if guarded is not None and guarded[1] else None)
        else:
            if keyword == "endif" and fallbacks:
                fallbacks.pop()
            hits = [] if directive else [(m.start(1), m.group(1)) for m in _DEFINED.finditer(line)]
        for offset, name in hits:
            refused = _IN_CONDITIONALS.fullmatch(name) or (name not in ALLOWLIST and name not in own)
            if refused and name not in _KEYWORDS:
                return Fingerprint(starts[index] + offset, name, f"conditional compilation on {name}, {_NOT_OWN}")
    return None


def _guard(line: str, rest: list[str]) -> tuple[str, bool] | None:
    """For ``#ifndef X`` or ``#if !defined(X)`` followed by ``#define X``: X and whether that
    ``#define`` is all its group holds (a fallback definition); else None."""
    match = _GUARD_TEST.match(line)
    if match is None:
        return None
    name = match.group(1) or match.group(2)
    body = [text for text in rest if text.strip()]
    if not body or _DEFINE_LINE.match(body[0]) is None or _DEFINE_LINE.match(body[0]).group(1) != name:  # type: ignore[union-attr]
        return None
    end = _DIRECTIVE_LINE.match(body[1]) if len(body) > 1 else None
    return name, end is not None and end.group(1) == "endif"


@functools.cache
def header_macros() -> frozenset[str]:
    """The macros nvcc's device pass defines through its own and load_inline's headers (names
    only, ``nvcc_device_macros.json``; the test that derives :data:`ALLOWLIST` checks it against
    the nvcc on PATH): a guard of one of those names is no include guard of the candidate's."""
    data = json.loads(resources.files("cuset_core.verify").joinpath("nvcc_device_macros.json").read_text())
    return frozenset(data["names"])


def _tested(directive: str) -> list[tuple[int, str]]:
    """(offset in the directive, name) of every name a conditional directive tests."""
    names = [(m.start(), m.group(0)) for m in _IDENTIFIER.finditer(directive)]
    return [(offset, name) for offset, name in names[1:] if name != "defined"]  # names[0]: the directive
