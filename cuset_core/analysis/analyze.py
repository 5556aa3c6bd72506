"""Sensitivity analysis of one answer: spans and regions in answer character offsets.

The CUDA and C++ sources come from ``sources.find_kernel_sources`` (the ``load_inline`` strings
of a Python answer, or a ``.cu`` answer); each is scanned on its own and every finding is mapped
back into the answer through the source's ``OffsetMap``. On the Python side the ``load_inline``
call itself is binding code: its name, its keyword names, the extension's ``name=`` and its
``functions=[...]`` list; the exported functions' names (that list, or a ``PYBIND11_MODULE``'s
``m.def`` targets) are binding code where the sources define or declare them.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuset_core.analysis.categories import DOMINANCE, Category
from cuset_core.analysis.scan import new_parser, pybind_exports, scan_source
from cuset_core.analysis.sources import InlineExtension, OffsetMap, find_kernel_sources
from cuset_core.analysis.spans import Analysis, Region, Span

__all__ = ["Analysis", "Region", "Span", "analyze_answer"]

_QUOTES = frozenset("\"'")


@dataclass(frozen=True)
class _Piece:
    """A sensitive answer span with the unit (answer offsets) it belongs to."""

    start: int
    end: int
    category: Category
    unit: tuple[int, int, str]


def analyze_answer(answer: str) -> Analysis:
    """Sensitive spans and regions of ``answer`` (Python with ``load_inline``, or ``.cu``;
    fenced or not). Broken code is analysed as far as it parses; this never raises."""
    sources = find_kernel_sources(answer)
    parser = new_parser()
    pieces: list[_Piece] = []
    chars = unparsed = 0
    for extension in sources.extensions:
        exported = frozenset(extension.functions or ()) or pybind_exports(extension.cpp + "\n" + extension.cuda, parser)
        for source, offsets in ((extension.cuda, extension.cuda_map), (extension.cpp, extension.cpp_map)):
            if not source.strip():
                continue
            scan = scan_source(source, parser, exported)
            chars += scan.chars
            unparsed += scan.unparsed_chars
            for finding in scan.findings:
                unit = _map_unit(offsets, finding.unit_start, finding.unit_end, finding.unit_kind, answer)
                for start, end in map_span(offsets, finding.start, finding.end, answer):
                    pieces.append(_Piece(start, end, finding.category, unit or (start, end, "expression")))
        pieces.extend(_extension_call_pieces(extension, answer))
    coverage = (chars - unparsed) / chars if chars else 0.0
    spans, regions = _assemble(pieces, answer)
    return Analysis(sources.language, spans, regions, coverage, chars)


def map_span(offsets: OffsetMap, start: int, end: int, answer: str) -> list[tuple[int, int]]:
    """Answer spans of source span ``[start, end)``.

    ``OffsetMap`` breaks a span wherever the source and the answer differ; inside one string
    literal that only happens at escape sequences (``\\n`` is two answer characters for one
    source character), so neighbouring pieces are joined unless a quote lies between them
    (the gap then crosses literal boundaries: concatenation, list items, other variables).
    """
    joined: list[tuple[int, int]] = []
    for piece_start, piece_end in offsets.span_to_answer(start, end):
        gap = answer[joined[-1][1] : piece_start] if joined else ""
        if joined and piece_start >= joined[-1][1] and not _QUOTES & set(gap):
            joined[-1] = (joined[-1][0], piece_end)
        else:
            joined.append((piece_start, piece_end))
    return [(a, b) for a, b in joined if a < b and answer[a:b].strip()]


def _map_unit(offsets: OffsetMap, start: int, end: int, kind: str, answer: str) -> tuple[int, int, str] | None:
    pieces = map_span(offsets, start, end, answer)
    if not pieces:
        return None
    return min(a for a, _ in pieces), max(b for _, b in pieces), kind


def _extension_call_pieces(extension: InlineExtension, answer: str) -> list[_Piece]:
    """Binding spans of the Python ``load_inline`` call: its name, keyword names, the literal
    extension ``name=`` and the ``functions=[...]`` list (whose names must match the C++
    declarations)."""
    if extension.call_span is None:
        return []
    call_start, call_end = extension.call_span
    unit = (call_start, call_end, "extension_call")
    spans = []
    name_at = answer.find("load_inline", call_start, call_end)
    if name_at >= 0:
        spans.append((name_at, name_at + len("load_inline")))
    spans.extend((start, end) for _, start, end in extension.keyword_spans)
    spans.extend(
        (start, end)
        for keyword, start, end in extension.keyword_values
        if (keyword == "functions" and answer[start] in "[(")  # a literal list, not a name
        or (keyword == "name" and answer[start] in _QUOTES)
    )
    return [_Piece(start, end, Category.BINDING, unit) for start, end in spans]


def _assemble(pieces: list[_Piece], answer: str) -> tuple[tuple[Span, ...], tuple[Region, ...]]:
    """Sort and de-overlap the pieces (the first, longest wins) and group them into regions."""
    pieces = sorted(pieces, key=lambda p: (p.start, -p.end))
    kept: list[_Piece] = []
    for piece in pieces:
        if kept and piece.start < kept[-1].end:
            continue
        kept.append(piece)
    spans = tuple(Span(p.start, p.end, p.category, answer[p.start : p.end]) for p in kept)
    members: dict[tuple[int, int, str], list[int]] = {}
    for index, piece in enumerate(kept):
        members.setdefault(piece.unit, []).append(index)
    regions = []
    for region_id, (unit, indices) in enumerate(sorted(members.items(), key=lambda item: item[0][:2])):
        present = {spans[i].category for i in indices}
        category = next(c for c in DOMINANCE if c in present)
        start = min(unit[0], spans[indices[0]].start)
        end = max(unit[1], spans[indices[-1]].end)
        regions.append(Region(region_id, start, end, unit[2], category, tuple(indices)))
    return spans, tuple(regions)
