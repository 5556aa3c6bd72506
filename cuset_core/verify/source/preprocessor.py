"""The text of a CUDA/C++ source that the compiler compiles, for the verifier's scans of it.

Several checks read a candidate's kernel sources as text: tier 0 looks for tests of the verifier's
own macros (``macros``), tier 2 for features its runtime cannot model (``cpu.rewrite``), for the
headers an ``unsupported`` claim names (``cpu.claims``) and for hard-coded problem sizes
(``cpu.sizes``). Text the compiler does not compile must not count there: a comment, a string or
character literal, a group the preprocessor skips (``#if 0``). Else a wrong kernel that names a
feature in such text would be ``unsupported``, which pass@k leaves out of its denominators.

Lexing follows the compiler's translation phases 1-3 closely enough for that: lines joined at a
backslash-newline first (``#i\\<newline>f 0`` is ``#if 0``), raw string literals (``R"x(...)x"``)
read in the text before that join, as the standard says, C++14 digit separators (``1'0`` is one
number, not the start of a character literal), and the header name of an ``#include`` kept: it is
no string literal.

:func:`compiled_code` also blanks the groups of conditional directives that no pass of the
compiler keeps. It evaluates each ``#if``/``#ifdef``/``#elif``... per pass (nvcc's device and
host passes for CUDA sources, plain g++ for C++ sources, as ``load_inline`` compiles them) with
three values, true, false and unknown, and keeps a line that some pass keeps for sure. A name is:

- what the candidate's own ``#define``/``#undef`` above it made it, where that directive is kept
  (under an unknown condition, the name is unknown after it);
- else what the pass is known to define: nvcc's device-pass macros with their values
  (``__CUDA_ARCH__`` 900, as tier 2 defines them; the host pass does not define
  ``__CUDA_ARCH__``), ``__cplusplus``, ``TORCH_EXTENSION_NAME``..., and names no build defines
  (``__CUDACC_RTC__``, ``__HIPCC__``, ``USE_ROCM``...);
- else unknown when a header may define it: a reserved name (``_X``, ``__x``) that the candidate
  does not define itself, and names of the C library's and torch's, CUDA's and Python's macro
  families (``M_PI``, ``FLT_MAX``, ``TORCH_*``, ``C10_*``, ``HAVE_*``...) even when it does;
- else undefined, the preprocessor's own rule for a name nobody defined (``USE_WMMA``, and the
  candidate's include guard before its ``#define``).

A group under an unknown condition is blanked: its features then do not make a candidate
``unsupported`` (a dead group could), and where the compiler does compile it, tier 2's build
meets the feature and the candidate's verdict is its own, never a score left out. What this does
not know: a header's macro outside those families that the candidate also ``#define``s
(``#ifndef SOME_HEADER_MACRO / #define SOME_HEADER_MACRO / ... / #endif`` reads as kept).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# What nvcc's device pass defines for sm_90, the architecture tier 2 models (``nvcc -dryrun -cubin
# -arch=sm_90``, CUDA 13.0), plus the -D flags torch.utils.cpp_extension passes nvcc
# (compile.TORCH_NVCC_FLAGS) and the version macros of cuda.h / cuda_runtime_api.h, which
# load_inline's prelude includes. Tier 2 defines them (cpu.build.DEVICE_PASS_MACROS); a test checks
# them against the nvcc on PATH.
NVCC_DEVICE_PASS: tuple[tuple[str, str], ...] = (
    ("__CUDA_ARCH__", "900"),
    ("__CUDA_ARCH_LIST__", "900"),
    ("CUDA_DOUBLE_MATH_FUNCTIONS", "1"),
    ("__CUDACC__", "1"),
    ("__NVCC__", "1"),
    ("__CUDACC_VER_MAJOR__", "13"),
    ("__CUDACC_VER_MINOR__", "0"),
    ("__CUDACC_VER_BUILD__", "88"),
    ("__CUDA_API_VER_MAJOR__", "13"),
    ("__CUDA_API_VER_MINOR__", "0"),
    ("__NVCC_DIAG_PRAGMA_SUPPORT__", "1"),
    ("__CUDACC_DEVICE_ATOMIC_BUILTINS__", "1"),
    ("__CUDA_NO_HALF_OPERATORS__", "1"),
    ("__CUDA_NO_HALF_CONVERSIONS__", "1"),
    ("__CUDA_NO_BFLOAT16_CONVERSIONS__", "1"),
    ("__CUDA_NO_HALF2_OPERATORS__", "1"),
    ("CUDA_VERSION", "13000"),
    ("CUDART_VERSION", "13000"),
)

# ---------------------------------------------------------------- lexing

_SPLICE = re.compile(r"\\[ \t]*\r?\n")  # GCC joins lines at a backslash, spaces before the newline or not
_LEXEME = re.compile(
    r"""(?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))
    |(?P<number>\.?\d(?:[eEpP][-+]|'[\w$]|[\w$.])*)
    |(?P<word>[^\W\d][\w$]*|\$[\w$]*)
    |(?P<string>"(?:\\.|[^"\\\n])*(?:"|(?=\n)|\Z))
    |(?P<char>'(?:\\.|[^'\\\n])*(?:'|(?=\n)|\Z))
    |(?P<other>[^\w$/"'.\n]+|.)""",
    re.VERBOSE | re.DOTALL,
)
_RAW_PREFIXES = frozenset({"R", "LR", "uR", "UR", "u8R"})
_RAW_OPENING = re.compile(r'"([^ ()\\\t\v\f\n]{0,16})\(')
_INCLUDE = re.compile(r"[ \t]*(?:#|%:)[ \t]*(?:include|include_next|import)\b[ \t]*(<[^>\n]*>|\"[^\"\n]*\")")


@dataclass(frozen=True)
class _Lexed:
    """A source after joining its continued lines (``text``), where each character of ``text``
    came from (``origin``, one more entry for the end; None when nothing was joined) and the
    ``(start, end, kind)`` spans of ``text`` that are no code: comments, string and character
    literals (kind ``"comment"``, ``"string"``, ``"char"``)."""

    source: str
    text: str
    origin: list[int] | None
    spans: list[tuple[int, int, str]]


def _lex(source: str) -> _Lexed:
    """Join continued lines and find the comments and literals, as the compiler reads them."""
    text, origin = _splice(source)
    spans: list[tuple[int, int, str]] = []
    pos, line_start = 0, True
    while pos < len(text):
        if line_start and (include := _INCLUDE.match(text, pos)):
            pos, line_start = include.end(), False  # a header name, kept as it is
            continue
        if text[pos] == "\n":
            pos, line_start = pos + 1, True
            continue
        match = _LEXEME.match(text, pos)
        assert match is not None  # the last alternative matches any character
        kind, end = match.lastgroup or "other", match.end()
        if kind == "word" and match.group() in _RAW_PREFIXES and text.startswith('"', end):
            raw_end = _raw_string_end(source, text, origin, end)
            if raw_end is not None:
                kind, end = "string", raw_end
        if kind in ("comment", "string", "char"):
            spans.append((pos, end, kind))
        line_start = line_start and kind == "comment" and "\n" not in text[pos:end]
        pos = end
    return _Lexed(source, text, origin, spans)


def _splice(source: str) -> tuple[str, list[int] | None]:
    """``source`` with every backslash-newline removed (translation phase 2) and, when one was,
    the index in ``source`` of each character of the result (plus its end)."""
    if _SPLICE.search(source) is None:
        return source, None
    pieces: list[str] = []
    origin: list[int] = []
    kept = 0
    for match in _SPLICE.finditer(source):
        pieces.append(source[kept : match.start()])
        origin.extend(range(kept, match.start()))
        kept = match.end()
    pieces.append(source[kept:])
    origin.extend(range(kept, len(source) + 1))
    return "".join(pieces), origin


def _raw_string_end(source: str, text: str, origin: list[int] | None, quote: int) -> int | None:
    """End (in ``text``) of the raw string literal whose ``"`` is at ``text[quote]``, or None when
    no raw string opens there. Its end is looked for in ``source``: the compiler reverts the
    joining of lines inside a raw string, so a backslash-newline can keep it from ending."""
    opening = _RAW_OPENING.match(text, quote)
    if opening is None:
        return None
    start = origin[opening.end()] if origin is not None else opening.end()
    closing = source.find(f'){opening.group(1)}"', start)
    if closing < 0:
        return len(text)
    end = closing + len(opening.group(1)) + 2
    return end if origin is None else bisect.bisect_left(origin, end)


_NO_CODE = frozenset({"comment", "string", "char"})


def _blanked(text: str, spans: list[tuple[int, int, str]], kinds: frozenset[str]) -> str:
    """``text`` with the spans of ``kinds`` turned into spaces (newlines kept)."""
    out = list(text)
    for start, end, kind in spans:
        if kind in kinds:
            for i in range(start, end):
                if out[i] != "\n":
                    out[i] = " "
    return "".join(out)


def _laid_out(lexed: _Lexed, text: str) -> str:
    """``text`` (as long as ``lexed.text``) laid out as ``lexed.source`` is: each joined line
    starts where its first physical line does and is padded to that line's end, with the newlines
    joining removed, so the result has the source's length and lines."""
    if lexed.origin is None:
        return text
    origin, source = lexed.origin, lexed.source
    out: list[str] = []
    start = physical_start = 0
    for line in text.split("\n"):
        end = start + len(line)
        # From the end of the line before (a backslash-newline there is this line's) to this one's.
        physical = source[physical_start : origin[end]]
        joined = physical.count("\n")
        out.append(line + " " * (len(physical) - len(line) - joined) + "\n" * joined)
        start, physical_start = end + 1, origin[end] + 1
    return "\n".join(out)


@dataclass(frozen=True)
class Joined:
    """A source's code with comments and string and character literals blanked (the header names
    of ``#include`` kept) and its continued lines joined (``text``), and for each character of
    ``text``, its index in the source (``origin``; None when no line was continued)."""

    text: str
    origin: list[int] | None

    def source_offset(self, offset: int) -> int:
        """The index in the source of ``text[offset]``."""
        return offset if self.origin is None else self.origin[offset]


def joined_code(source: str) -> Joined:
    """``source``'s code as tier 0 reads it: no comment or literal, names split by a
    backslash-newline whole, and every conditional group, kept or not."""
    lexed = _lex(source)
    return Joined(_blanked(lexed.text, lexed.spans, _NO_CODE), lexed.origin)


def strip_comments(source: str) -> str:
    """``source`` with its comments blanked and nothing else changed (what is left compiles as
    ``source`` does: a comment continued by a backslash-newline is blanked on both lines)."""
    lexed = _lex(source)
    out = list(source)
    for start, end, kind in lexed.spans:
        if kind != "comment":
            continue
        # Only the comment's own characters: a backslash-newline inside it or right after it
        # stays, and so does the directive it continues.
        for i in range(start, end) if lexed.origin is None else (lexed.origin[k] for k in range(start, end)):
            if out[i] != "\n":
                out[i] = " "
    return "".join(out)


# ---------------------------------------------------------------- what the preprocessor keeps

Tri = bool | None  # true, false, or unknown to the scan


@dataclass(frozen=True)
class _Macro:
    """What the scan knows of a name at one point of a pass: whether it is defined (None: it may
    be or not) and, for a defined object-like macro, its replacement text (None: not known)."""

    defined: Tri
    body: str | None = None


_UNDEFINED, _UNKNOWN, _DEFINED = _Macro(False), _Macro(None), _Macro(True)
_NVCC_ONLY = (
    "__CUDACC__",
    "__NVCC__",
    "__CUDA_ARCH__",
    "__CUDA_ARCH_LIST__",
    "__CUDACC_VER_MAJOR__",
    "__CUDACC_VER_MINOR__",
    "__CUDACC_VER_BUILD__",
    "__NVCC_DIAG_PRAGMA_SUPPORT__",
    "__CUDACC_DEVICE_ATOMIC_BUILTINS__",
)
# Defined in every build of a torch extension, on a GPU and in tiers 1 and 2, with a value the
# scan does not need; and names none of them defines (other compilers and platforms).
_EVERY_PASS: dict[str, _Macro] = {
    **dict.fromkeys(
        (
            "__cplusplus",
            "__GNUC__",
            "__GNUC_MINOR__",
            "__GNUG__",
            "TORCH_EXTENSION_NAME",
            "TORCH_API_INCLUDE_EXTENSION_H",
        ),
        _DEFINED,
    ),
    **dict.fromkeys(
        (
            "__CUDACC_RTC__",
            "__HIPCC__",
            "__HIP__",
            "__HIP_PLATFORM_AMD__",
            "__HIP_PLATFORM_HCC__",
            "__HIP_DEVICE_COMPILE__",
            "USE_ROCM",
            "__clang__",
            "_MSC_VER",
            "_WIN32",
            "_WIN64",
            "__APPLE__",
        ),
        _UNDEFINED,
    ),
}
_DEVICE_PASS = {**_EVERY_PASS, **{name: _Macro(True, value) for name, value in NVCC_DEVICE_PASS}}
# nvcc's host pass: no __CUDA_ARCH__; the device pass's own flags it may or may not define too.
_HOST_PASS = {
    **_DEVICE_PASS,
    "__CUDA_ARCH__": _UNDEFINED,
    **dict.fromkeys(
        ("CUDA_DOUBLE_MATH_FUNCTIONS", "__NVCC_DIAG_PRAGMA_SUPPORT__", "__CUDACC_DEVICE_ATOMIC_BUILTINS__"), _UNKNOWN
    ),
}
# g++ on load_inline's C++ sources: no nvcc macros; the version macros come with CUDA's headers.
_CPP_PASS = {**_EVERY_PASS, **dict.fromkeys((name for name, _ in NVCC_DEVICE_PASS), _UNKNOWN)}
_CPP_PASS.update(dict.fromkeys(_NVCC_ONLY, _UNDEFINED))

_RESERVED = re.compile(r"_[A-Z_]\w*")
_HEADER_FAMILIES = re.compile(
    r"M_\w+|\w+_(?:MAX|MIN|EPSILON|BIT|WIDTH)|INFINITY|NAN|HUGE_VAL\w*|NULL|EOF|errno|assert|offsetof"
    r"|(?:TORCH|C10|AT|CAFFE2|PYBIND11|PY|Py|CUDART|CUB|THRUST|CUTLASS|CUBLAS|CUDNN|NV|HAVE|SIZEOF|WITH)_\w+"
)
_DIRECTIVE = re.compile(r"[ \t]*(?:#|%:)[ \t]*([A-Za-z_]\w*)")
_DEFINITION = re.compile(r"^[ \t]*(?:#|%:)[ \t]*(?:define|undef)[ \t]+([A-Za-z_]\w*)", re.MULTILINE)
_MACRO_DEFINITION = re.compile(r"[ \t]+([A-Za-z_]\w*)(\()?(.*)", re.DOTALL)


def compiled_code(source: str, *, cuda: bool = True) -> str:
    """``source`` as the compiler compiles it: :func:`joined_code`, with the lines of conditional
    groups that no pass keeps for sure blanked too, laid out as ``source`` (the same length and
    lines; a joined line stands on its first line).

    ``cuda``: the source is compiled by nvcc (device and host pass), else by g++ as plain C++
    (``load_inline``'s C++ sources)."""
    lexed = _lex(source)
    code = _blanked(lexed.text, lexed.spans, _NO_CODE)
    directives = _blanked(lexed.text, lexed.spans, frozenset({"comment"}))  # literals kept for #if
    lines, raw_lines = code.split("\n"), directives.split("\n")
    own = set(_DEFINITION.findall(code))
    kept = [False] * len(lines)
    for known in (_DEVICE_PASS, _HOST_PASS) if cuda else (_CPP_PASS,):
        for index, status in enumerate(_line_statuses(lines, raw_lines, known, own)):
            kept[index] = kept[index] or status is True
    shown = "\n".join(line if keep else re.sub(r"[^\n]", " ", line) for line, keep in zip(lines, kept))
    return _laid_out(lexed, shown)


@dataclass
class _Group:
    """An open conditional group: whether the code around it is kept, and whether one of its
    branches so far was taken."""

    around: Tri
    taken: Tri


def _line_statuses(lines: list[str], raw_lines: list[str], known: Mapping[str, _Macro], own: set[str]) -> list[Tri]:
    """For each line of a joined, comment-free source: whether one pass keeps it (a conditional
    directive belongs to the code around its group), its macros being ``known`` beforehand."""
    macros: dict[str, _Macro] = {}

    def lookup(name: str) -> _Macro:
        if name in macros:
            return macros[name]
        if name in known:
            return known[name]
        if _HEADER_FAMILIES.fullmatch(name) or (_RESERVED.fullmatch(name) and name not in own):
            return _UNKNOWN
        return _UNDEFINED

    statuses: list[Tri] = []
    groups: list[_Group] = []
    kept: Tri = True
    for line, raw in zip(lines, raw_lines):
        directive = _DIRECTIVE.match(line)
        keyword = directive.group(1) if directive else ""
        argument = raw[directive.end() :] if directive else ""
        if keyword in ("if", "ifdef", "ifndef"):
            statuses.append(kept)
            condition = _condition(keyword, argument, lookup)
            groups.append(_Group(kept, condition))
            kept = _and(kept, condition)
        elif keyword in ("elif", "elifdef", "elifndef", "else") and groups:
            group = groups[-1]
            statuses.append(group.around)
            condition = True if keyword == "else" else _condition(keyword, argument, lookup)
            kept = _and(group.around, _and(_not(group.taken), condition))
            group.taken = _or(group.taken, condition)
        elif keyword == "endif" and groups:
            kept = groups.pop().around
            statuses.append(kept)
        else:
            statuses.append(kept)
            if keyword in ("define", "undef") and kept is not False:
                _record(macros, keyword, argument, kept)
    return statuses


def _record(macros: dict[str, _Macro], keyword: str, argument: str, kept: Tri) -> None:
    """Note a ``#define``/``#undef`` (its ``argument``, after the keyword) on a line one pass keeps
    (``kept`` True) or may keep (None: the name is unknown after it)."""
    match = _MACRO_DEFINITION.match(argument)
    if match is None:
        return
    name = match.group(1)
    if kept is None:
        macros[name] = _UNKNOWN
    elif keyword == "undef":
        macros[name] = _UNDEFINED
    else:  # a function-like macro's value is not known; an object-like one's is its text
        macros[name] = _DEFINED if match.group(2) else _Macro(True, match.group(3))


def _condition(keyword: str, argument: str, lookup: Callable[[str], _Macro]) -> Tri:
    """Whether the condition of a conditional directive holds, with the macros of ``lookup``."""
    if keyword in ("elifdef", "elifndef"):  # C++23's; what an older -std makes of them varies
        return None
    if keyword in ("ifdef", "ifndef"):
        name = re.match(r"\s*([A-Za-z_]\w*)", argument)
        defined = lookup(name.group(1)).defined if name else None
        return defined if keyword == "ifdef" else _not(defined)
    value = _evaluate(argument, lookup)
    return None if value is None else value != 0


def _and(a: Tri, b: Tri) -> Tri:
    return False if a is False or b is False else (True if a and b else None)


def _or(a: Tri, b: Tri) -> Tri:
    return True if a is True or b is True else (False if a is False and b is False else None)


def _not(a: Tri) -> Tri:
    return None if a is None else not a


# ---------------------------------------------------------------- #if expressions

_PP_TOKEN = re.compile(
    r"\s+|(?P<number>\.?\d(?:[eEpP][-+]|'[\w$]|[\w$.])*)|(?P<name>[^\W\d][\w$]*)"
    r"|(?P<op>&&|\|\||<<|>>|<=|>=|==|!=|[-+*/%<>&|^!~?:(),])"
)
_ALTERNATIVE = {"and": "&&", "or": "||", "not": "!", "bitand": "&", "bitor": "|", "xor": "^", "compl": "~"}
_ALTERNATIVE |= {"not_eq": "!="}
_INTEGER = re.compile(r"(?i)(0x[0-9a-f]+|0b[01]+|0[0-7]*|[1-9][0-9]*)l{0,2}")
_INT64 = (-(1 << 63), (1 << 63) - 1)
_MAX_EXPANSIONS = 1000
_MAX_DEPTH = 100  # macros expanding one another, well within Python's stack

Value = int | None  # None: not known to the scan


class _Unknown(Exception):
    """The expression is not one the scan can evaluate (a syntax it does not model, a number it
    cannot type, an expansion too long)."""


def _evaluate(expression: str, lookup: Callable[[str], _Macro]) -> Value:
    """The value of an ``#if`` expression, or None when the scan cannot know it.

    Names are expanded as the preprocessor does, by text (``#define A 1 ? 0 : 1`` makes
    ``A + 1`` zero), with ``lookup`` telling what each is. An unknown name, a function-like
    macro's call or a builtin (``__has_include(...)``) is an unknown operand; ``&&``, ``||``
    and ``?:`` still decide where the known operand does. Whatever might be unsigned (a
    ``u`` suffix, a constant beyond int64) is unknown: C's conversions would change the result,
    and so is a value that overflows int64."""
    try:
        items = _expanded(_pp_tokens(expression), lookup, frozenset(), [0])
        parser = _Parser(items)
        value = parser.expression()
        if parser.pos != len(items):
            raise _Unknown
    except (_Unknown, RecursionError):  # RecursionError: parentheses nested past Python's stack
        return None
    return value


def _pp_tokens(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        match = _PP_TOKEN.match(text, pos)
        if match is None:  # a literal, a #, ...: not modelled
            raise _Unknown
        if match.lastgroup is not None:
            tokens.append(match.group())
        pos = match.end()
    return tokens


_Item = int | str | None  # a value (None: unknown) or an operator


def _expanded(
    tokens: list[str], lookup: Callable[[str], _Macro], hidden: frozenset[str], spent: list[int]
) -> list[_Item]:
    """``tokens`` with ``defined``, names and numbers replaced by values (``hidden``: the macros
    being expanded, which stay names; ``spent``: expansions so far, shared)."""
    items: list[_Item] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token[0].isdigit() or token[0] == ".":
            items.append(_number(token))
        elif not (token[0].isalpha() or token[0] in "_$"):
            items.append(token)
        elif token in _ALTERNATIVE:
            items.append(_ALTERNATIVE[token])
        elif token in ("true", "false"):
            items.append(int(token == "true"))
        elif token == "defined":
            name, i = _defined_operand(tokens, i)
            defined = lookup(name).defined
            items.append(None if defined is None else int(defined))
        elif i < len(tokens) and tokens[i] == "(":  # a function-like macro's call or a builtin
            i = _after_parentheses(tokens, i)
            items.append(None)
        elif token in hidden:
            items.append(0)
        elif len(hidden) >= _MAX_DEPTH:
            raise _Unknown
        else:
            macro = lookup(token)
            spent[0] += 1
            if spent[0] > _MAX_EXPANSIONS:
                raise _Unknown
            if macro.defined is False:
                items.append(0)
            elif macro.defined is None or macro.body is None:
                items.append(None)
            else:
                items += _expanded(_pp_tokens(macro.body), lookup, hidden | {token}, spent)
    return items


def _defined_operand(tokens: list[str], i: int) -> tuple[str, int]:
    """The name ``defined`` tests (``defined X`` or ``defined(X)``) and the index after it."""
    parenthesized = i < len(tokens) and tokens[i] == "("
    at = i + 1 if parenthesized else i
    if at >= len(tokens) or not (tokens[at][0].isalpha() or tokens[at][0] == "_"):
        raise _Unknown
    if parenthesized:
        if at + 1 >= len(tokens) or tokens[at + 1] != ")":
            raise _Unknown
        return tokens[at], at + 2
    return tokens[at], at + 1


def _after_parentheses(tokens: list[str], i: int) -> int:
    """The index after the parenthesis that closes the one at ``tokens[i]``."""
    depth = 0
    for j in range(i, len(tokens)):
        depth += {"(": 1, ")": -1}.get(tokens[j], 0)
        if depth == 0:
            return j + 1
    raise _Unknown


def _number(token: str) -> Value:
    """A signed integer constant's value (digit separators dropped); None for anything the scan
    does not type as int64 (unsigned, floating, too large, malformed)."""
    match = _INTEGER.fullmatch(token.replace("'", ""))
    if match is None:
        return None
    digits = match.group(1).lower()
    value = int(
        digits,
        16
        if digits.startswith("0x")
        else 2
        if digits.startswith("0b")
        else 8
        if digits != "0" and digits.startswith("0")
        else 10,
    )
    return value if value <= _INT64[1] else None


_BINARY: dict[str, tuple[int, Callable[[int, int], Value]]] = {
    "*": (10, lambda a, b: a * b),
    "/": (10, lambda a, b: None if b == 0 else _truncated(a, b)),
    "%": (10, lambda a, b: None if b == 0 else a - b * _truncated(a, b)),
    "+": (9, lambda a, b: a + b),
    "-": (9, lambda a, b: a - b),
    "<<": (8, lambda a, b: a << b if 0 <= b < 64 and a >= 0 else None),
    ">>": (8, lambda a, b: a >> b if 0 <= b < 64 else None),
    "<": (7, lambda a, b: int(a < b)),
    ">": (7, lambda a, b: int(a > b)),
    "<=": (7, lambda a, b: int(a <= b)),
    ">=": (7, lambda a, b: int(a >= b)),
    "==": (6, lambda a, b: int(a == b)),
    "!=": (6, lambda a, b: int(a != b)),
    "&": (5, lambda a, b: a & b),
    "^": (4, lambda a, b: a ^ b),
    "|": (3, lambda a, b: a | b),
}


def _truncated(a: int, b: int) -> int:
    """C's integer division, which truncates toward zero."""
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _checked(value: Value) -> Value:
    """``value``, or None where it leaves int64 (the preprocessor's arithmetic would wrap)."""
    return value if value is None or _INT64[0] <= value <= _INT64[1] else None


class _Parser:
    """Precedence climbing over expanded items, in three values (None: unknown)."""

    def __init__(self, items: list[_Item]) -> None:
        self.items = items
        self.pos = 0

    def peek(self) -> _Item:
        return self.items[self.pos] if self.pos < len(self.items) else ")"  # the end reads as a ")"

    def take(self, operator: str) -> bool:
        if self.pos < len(self.items) and self.items[self.pos] == operator:
            self.pos += 1
            return True
        return False

    def expression(self) -> Value:
        """comma-expression: C++ allows ``,`` in ``#if``; its value is the right operand's."""
        value = self.conditional()
        while self.take(","):
            value = self.conditional()
        return value

    def conditional(self) -> Value:
        condition = self.logical_or()
        if not self.take("?"):
            return condition
        then = self.expression()
        if not self.take(":"):
            raise _Unknown
        otherwise = self.conditional()
        # An unknown branch may be unsigned, which would convert the other: then nothing is known.
        if condition is None or then is None or otherwise is None:
            return None
        return then if condition else otherwise

    def logical_or(self) -> Value:
        value = self.logical_and()
        while self.take("||"):
            right = self.logical_and()
            value = 1 if value or right else (0 if value == 0 and right == 0 else None)
        return value

    def logical_and(self) -> Value:
        value = self.binary(3)
        while self.take("&&"):
            right = self.binary(3)
            value = 0 if value == 0 or right == 0 else (1 if value is not None and right is not None else None)
        return value

    def binary(self, lowest: int) -> Value:
        value = self.unary()
        while isinstance(operator := self.peek(), str) and operator in _BINARY and _BINARY[operator][0] >= lowest:
            precedence, apply = _BINARY[operator]
            self.pos += 1
            right = self.binary(precedence + 1)
            value = None if value is None or right is None else _checked(apply(value, right))
        return value

    def unary(self) -> Value:
        item = self.peek()
        if self.pos >= len(self.items):
            raise _Unknown
        self.pos += 1
        if item == "(":
            value = self.expression()
            if not self.take(")"):
                raise _Unknown
            return value
        if item in ("+", "-", "!", "~"):
            operand = self.unary()
            if operand is None:
                return None
            return _checked({"+": operand, "-": -operand, "!": int(operand == 0), "~": ~operand}[str(item)])
        if item is None or isinstance(item, int):
            return item
        raise _Unknown
