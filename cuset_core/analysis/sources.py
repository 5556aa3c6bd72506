"""Find the CUDA and C++ sources in an answer without executing it.

A Python answer builds its extension with ``torch.utils.cpp_extension.load_inline(...)``; the
sources are string literals, often held in module-level variables, sometimes concatenated.
We resolve them through the AST and keep, for every character of the resolved source, where it
came from in the answer, so spans found in the CUDA code can be shown (and aligned to tokens)
in the answer itself. A standalone ``.cu`` answer is its own CUDA source.
"""

from __future__ import annotations

import ast
import bisect
import io
import re
import tokenize
from dataclasses import dataclass, field

from cuset_core.analysis.extract import answer_code

_CUDA_LANGS = {"cu", "cuda", "cpp", "c++", "c", "cuh", "h", "hpp"}
_PY_LANGS = {"python", "py", "python3", ""}


@dataclass(frozen=True)
class OffsetMap:
    """Maps character positions of a resolved source back to positions in the answer.

    Stored as runs: ``(source_start, answer_start, length)``, sorted by ``source_start``.
    Characters that came from no literal (e.g. the ``"\\n"`` that joins list items) map to None.
    """

    runs: tuple[tuple[int, int, int], ...] = ()

    def to_answer(self, index: int) -> int | None:
        """Answer offset of source character ``index``, or None if it has no origin there."""
        starts = [run[0] for run in self.runs]
        k = bisect.bisect_right(starts, index) - 1
        if k < 0:
            return None
        source_start, answer_start, length = self.runs[k]
        if index < source_start + length:
            return answer_start + index - source_start
        return None

    def span_to_answer(self, start: int, end: int) -> list[tuple[int, int]]:
        """Answer spans (half-open) covering source span ``[start, end)``; may be several."""
        pieces: list[tuple[int, int]] = []
        for source_start, answer_start, length in self.runs:
            lo, hi = max(start, source_start), min(end, source_start + length)
            if lo < hi:
                a, b = answer_start + lo - source_start, answer_start + hi - source_start
                if pieces and pieces[-1][1] == a:
                    pieces[-1] = (pieces[-1][0], b)
                else:
                    pieces.append((a, b))
        return pieces


@dataclass
class _Builder:
    """Accumulates resolved text and its offset runs."""

    text: list[str] = field(default_factory=list)
    runs: list[tuple[int, int, int]] = field(default_factory=list)
    length: int = 0

    def add(self, text: str, answer_start: int | None, raw_map: list[int] | None = None) -> None:
        """Append ``text``; ``raw_map[i]`` (or ``answer_start + i``) is the origin of char i."""
        if raw_map is None and answer_start is not None:
            raw_map = [answer_start + i for i in range(len(text))]
        if raw_map is not None:
            run_start = 0
            for i in range(1, len(text) + 1):
                if i == len(text) or raw_map[i] != raw_map[i - 1] + 1:
                    self.runs.append((self.length + run_start, raw_map[run_start], i - run_start))
                    run_start = i
        self.text.append(text)
        self.length += len(text)

    def extend(self, other: _Builder) -> None:
        for s, a, n in other.runs:
            self.runs.append((self.length + s, a, n))
        self.text.extend(other.text)
        self.length += other.length

    def build(self) -> tuple[str, OffsetMap]:
        return "".join(self.text), OffsetMap(tuple(self.runs))


@dataclass(frozen=True)
class InlineExtension:
    """One ``load_inline`` call (or a ``.cu`` answer) with its sources resolved."""

    cuda: str
    cpp: str
    cuda_map: OffsetMap
    cpp_map: OffsetMap
    name: str | None = None
    functions: tuple[str, ...] | None = None
    call_span: tuple[int, int] | None = None  # the call expression, in answer offsets
    keyword_spans: tuple[tuple[str, int, int], ...] = ()  # (keyword, start, end) in the answer
    keyword_values: tuple[tuple[str, int, int], ...] = ()  # (keyword, value start, value end)


@dataclass(frozen=True)
class KernelSources:
    """All CUDA/C++ code found in an answer."""

    language: str  # "python" or "cu"
    code: str  # the scored code (first fenced block, or the whole answer)
    code_start: int  # offset of ``code`` in the answer
    extensions: tuple[InlineExtension, ...]
    unresolved: tuple[str, ...] = ()  # source arguments we could not resolve statically
    syntax_error: str | None = None  # Python answers that do not parse

    @property
    def cuda(self) -> str:
        """All CUDA sources, joined (what tier 1 compiles and the analysis parses)."""
        return "\n".join(ext.cuda for ext in self.extensions if ext.cuda)

    @property
    def has_kernel(self) -> bool:
        return any("__global__" in ext.cuda or "__global__" in ext.cpp for ext in self.extensions)


def find_kernel_sources(answer: str) -> KernelSources:
    """Locate the CUDA and C++ sources of an answer (Python with ``load_inline``, or ``.cu``)."""
    block = answer_code(answer)
    if block.language in _CUDA_LANGS or (block.language in _PY_LANGS and _looks_like_cu(block.code)):
        builder = _Builder()
        builder.add(block.code, block.start)
        text, omap = builder.build()
        ext = InlineExtension(cuda=text, cpp="", cuda_map=omap, cpp_map=OffsetMap())
        return KernelSources("cu", block.code, block.start, (ext,))
    return _python_sources(block.code, block.start)


def _looks_like_cu(code: str) -> bool:
    """Unlabelled code is CUDA when it has C includes or kernels and nothing of Python's."""
    if "load_inline" in code or re.search(r"^\s*(import|from)\s+\w", code, re.MULTILINE):
        return False
    return "__global__" in code or bool(re.search(r"^\s*#include\s*[<\"]", code, re.MULTILINE))


class _Resolver:
    """Resolves an expression to a string, following module-level names, ``+`` and lists."""

    def __init__(self, code: str, code_start: int, tree: ast.Module):
        self.code = code
        self.code_start = code_start
        self.line_starts = [0]
        for match in re.finditer("\n", code):
            self.line_starts.append(match.end())
        self.assignments: dict[str, ast.expr] = {}
        # Module-level assignments win; function-level ones are a fallback.
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id not in self.assignments:
                        self.assignments[target.id] = node.value
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.assignments[target.id] = node.value
        self.unresolved: list[str] = []

    def char_offset(self, lineno: int, col_bytes: int) -> int:
        """Character offset in ``code`` of an AST (line, UTF-8 byte column) position."""
        line_start = self.line_starts[lineno - 1]
        line_end = self.code.find("\n", line_start)
        line = self.code[line_start : line_end if line_end >= 0 else len(self.code)]
        prefix = line.encode("utf-8")[:col_bytes].decode("utf-8", errors="ignore")
        return line_start + len(prefix)

    def node_span(self, node: ast.expr) -> tuple[int, int]:
        assert node.end_lineno is not None and node.end_col_offset is not None, "parsed nodes have end positions"
        start = self.char_offset(node.lineno, node.col_offset)
        end = self.char_offset(node.end_lineno, node.end_col_offset)
        return start, end

    def resolve(self, node: ast.expr, depth: int = 0) -> _Builder | None:
        if depth > 20:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return self._literal(node, node.value)
        if isinstance(node, ast.Name) and node.id in self.assignments:
            return self.resolve(self.assignments[node.id], depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.resolve(node.left, depth + 1), self.resolve(node.right, depth + 1)
            if left is None or right is None:
                return None
            left.extend(right)
            return left
        if isinstance(node, (ast.List, ast.Tuple)):
            # load_inline joins a list of sources with newlines.
            return self._joined(node.elts, "\n", depth)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join"
            and isinstance(node.func.value, ast.Constant)
            and isinstance(node.func.value.value, str)
            and len(node.args) == 1
        ):
            items = node.args[0]
            if isinstance(items, ast.Name) and items.id in self.assignments:
                items = self.assignments[items.id]
            if isinstance(items, (ast.List, ast.Tuple)):
                return self._joined(items.elts, node.func.value.value, depth)
        if isinstance(node, ast.JoinedStr):
            # f-strings: literal parts keep no origin (their escapes are pre-decoded by the
            # parser); interpolated names are resolved, anything else stays opaque.
            out = _Builder()
            for value in node.values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    out.add(value.value, None)
                elif isinstance(value, ast.FormattedValue) and value.format_spec is None:
                    part = self.resolve(value.value, depth + 1)
                    if part is None:
                        return None
                    out.extend(part)
                else:
                    return None
            return out
        self.unresolved.append(ast.unparse(node)[:80])
        return None

    def _joined(self, elements: list[ast.expr], separator: str, depth: int) -> _Builder | None:
        out = _Builder()
        for i, element in enumerate(elements):
            part = self.resolve(element, depth + 1)
            if part is None:
                return None
            if i:
                out.add(separator, None)
            out.extend(part)
        return out

    def _literal(self, node: ast.Constant, value: str) -> _Builder:
        """The string constant ``node`` (whose ``value`` is ``value``), mapped to its source characters."""
        start, end = self.node_span(node)
        raw = self.code[start:end]
        out = _Builder()
        pieces = _string_tokens(raw)
        decoded_total = "".join(text for text, _ in pieces)
        if decoded_total != value:
            # Could not map reliably (unusual literal): keep the text, drop the origin.
            out.add(value, None)
            return out
        base = self.code_start + start
        for text, raw_map in pieces:
            out.add(text, None, [base + i for i in raw_map])
        return out


_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "0": "\0",
}


def _string_tokens(raw: str) -> list[tuple[str, list[int]]]:
    """Decode the string literal(s) in ``raw`` (implicit concatenation allowed).

    Returns, per literal, its decoded text and for each decoded char its offset in ``raw``.
    """
    pieces: list[tuple[str, list[int]]] = []
    line_starts = [0] + [m.end() for m in re.finditer("\n", raw)]
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(raw).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    for token in tokens:
        if token.type != tokenize.STRING:
            continue
        offset = line_starts[token.start[0] - 1] + token.start[1]
        literal = token.string
        prefix_len = len(literal) - len(literal.lstrip("rRbBuUfF"))
        prefix = literal[:prefix_len].lower()
        quote = literal[prefix_len : prefix_len + 3]
        if quote not in ('"""', "'''"):
            quote = quote[0]
        body_start = prefix_len + len(quote)
        body = literal[body_start : len(literal) - len(quote)]
        base = offset + body_start
        if "r" in prefix:
            pieces.append((body, [base + i for i in range(len(body))]))
            continue
        chars: list[str] = []
        origin: list[int] = []
        i = 0
        while i < len(body):
            ch = body[i]
            if ch != "\\" or i + 1 >= len(body):
                chars.append(ch)
                origin.append(base + i)
                i += 1
                continue
            nxt = body[i + 1]
            if nxt == "\n":  # line continuation
                i += 2
            elif nxt in _ESCAPES:
                chars.append(_ESCAPES[nxt])
                origin.append(base + i)
                i += 2
            elif nxt == "x" and i + 3 < len(body) + 1:
                chars.append(chr(int(body[i + 2 : i + 4], 16)))
                origin.append(base + i)
                i += 4
            elif nxt in "uU":
                width = 4 if nxt == "u" else 8
                chars.append(chr(int(body[i + 2 : i + 2 + width], 16)))
                origin.append(base + i)
                i += 2 + width
            else:  # unknown escape: Python keeps the backslash
                chars.append(ch)
                origin.append(base + i)
                i += 1
        pieces.append(("".join(chars), origin))
    return pieces


def _python_sources(code: str, code_start: int) -> KernelSources:
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        # Truncated generations do not parse; their kernels still sit in triple-quoted strings.
        return KernelSources(
            "python",
            code,
            code_start,
            _kernel_strings(code, code_start),
            syntax_error=f"line {exc.lineno}: {exc.msg}",
        )
    resolver = _Resolver(code, code_start, tree)
    extensions: list[InlineExtension] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _call_name(node) != "load_inline":
            continue
        args = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        positional = ["name", "cpp_sources", "cuda_sources", "functions"]
        for name, value in zip(positional, node.args):
            args.setdefault(name, value)
        cuda = resolver.resolve(args["cuda_sources"]) if "cuda_sources" in args else _Builder()
        cpp = resolver.resolve(args["cpp_sources"]) if "cpp_sources" in args else _Builder()
        cuda_text, cuda_map = (cuda or _Builder()).build()
        cpp_text, cpp_map = (cpp or _Builder()).build()
        start, end = resolver.node_span(node)
        keyword_spans, keyword_values = [], []
        for kw in node.keywords:
            if kw.arg:
                kw_start = resolver.char_offset(kw.lineno, kw.col_offset)
                keyword_spans.append((kw.arg, code_start + kw_start, code_start + kw_start + len(kw.arg)))
                value_start, value_end = resolver.node_span(kw.value)
                keyword_values.append((kw.arg, code_start + value_start, code_start + value_end))
        extensions.append(
            InlineExtension(
                cuda=cuda_text,
                cpp=cpp_text,
                cuda_map=cuda_map,
                cpp_map=cpp_map,
                name=_const_str(_assigned(args.get("name"), resolver)),
                functions=_const_str_list(args.get("functions"), resolver),
                call_span=(code_start + start, code_start + end),
                keyword_spans=tuple(keyword_spans),
                keyword_values=tuple(keyword_values),
            )
        )
    return KernelSources("python", code, code_start, tuple(extensions), unresolved=tuple(resolver.unresolved))


def _call_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _const_str(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _assigned(node: ast.expr | None, resolver: _Resolver) -> ast.expr | None:
    """``node``, or the value a module-level assignment gave it when it is a name."""
    if isinstance(node, ast.Name) and node.id in resolver.assignments:
        return resolver.assignments[node.id]
    return node


def _const_str_list(node: ast.expr | None, resolver: _Resolver) -> tuple[str, ...] | None:
    node = _assigned(node, resolver)
    if isinstance(node, (ast.List, ast.Tuple)):
        names = [_const_str(element) for element in node.elts]
        if all(name is not None for name in names):
            return tuple(names)  # type: ignore[arg-type]
    return None


_TRIPLE_QUOTED = re.compile(r'[rR]?("""|\'\'\')(.*?)(?:\1|\Z)', re.DOTALL)


def _kernel_strings(code: str, code_start: int) -> tuple[InlineExtension, ...]:
    """Triple-quoted strings holding a kernel, from code that does not parse (origins kept)."""
    builder = _Builder()
    for match in _TRIPLE_QUOTED.finditer(code):
        if "__global__" in match.group(2):
            if builder.length:
                builder.add("\n", None)
            builder.add(match.group(2), code_start + match.start(2))
    if not builder.length:
        return ()
    text, omap = builder.build()
    return (InlineExtension(cuda=text, cpp="", cuda_map=omap, cpp_map=OffsetMap()),)
