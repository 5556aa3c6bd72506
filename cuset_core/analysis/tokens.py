"""Map an analysis (answer character spans) onto the tokens of a rendered text."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from cuset_core.analysis.categories import Category
from cuset_core.analysis.spans import Analysis


@dataclass
class TokenSensitivity:
    """One entry per token: is it sensitive, its span's category, the region of its span
    (-1: none) and the region whose unit holds it (``unit_region``, -1: none).

    ``region`` is set on sensitive tokens only (``region_extent: span``); ``unit_region`` also
    on the other tokens of a region's syntactic unit (``region_extent: unit``), and equals
    ``region`` on sensitive tokens.
    """

    sensitive: list[bool]
    category: list[Category | None]
    region: list[int]
    unit_region: list[int]


def align_tokens(analysis: Analysis, offsets: Sequence[tuple[int, int]], answer_start: int) -> TokenSensitivity:
    """Token-level sensitivity from a fast tokenizer's character ``offsets``.

    ``offsets[k]`` is the half-open character span of token k in the rendered text (a chat
    template, say) in which the analysed answer starts at character ``answer_start``. A token is
    sensitive when it overlaps a sensitive span; its category and region are those of the last
    span it overlaps. A token overlapping a region's unit belongs to that region, to the
    innermost one where units nest (an ``AT_DISPATCH_*`` statement holds its lambda's
    statements). Empty offsets (special tokens) are never sensitive and in no region.
    """
    spans = analysis.spans
    starts = [span.start for span in spans]
    region_of = [-1] * len(spans)
    for found in analysis.regions:
        for index in found.span_indices:
            region_of[index] = found.id
    owner = _unit_owners(analysis)
    sensitive: list[bool] = []
    category: list[Category | None] = []
    region: list[int] = []
    unit_region: list[int] = []
    for token_start, token_end in offsets:
        start, end = int(token_start) - answer_start, int(token_end) - answer_start
        # Spans are sorted and disjoint, so their ends are sorted too: only the last span that
        # starts before the token ends can overlap it.
        index = bisect.bisect_left(starts, end) - 1 if end > start else -1
        if index >= 0 and spans[index].end > start:
            sensitive.append(True)
            category.append(spans[index].category)
            region.append(region_of[index])
            unit_region.append(region_of[index])
        else:
            sensitive.append(False)
            category.append(None)
            region.append(-1)
            inside = owner[max(start, 0) : max(end, 0)]
            unit_region.append(next((r for r in inside if r >= 0), -1))
    return TokenSensitivity(sensitive, category, region, unit_region)


def _unit_owners(analysis: Analysis) -> list[int]:
    """Region id per answer character (-1: none); where units nest, the innermost one wins."""
    size = max((r.end for r in analysis.regions), default=0)
    owner = [-1] * size
    for region in sorted(analysis.regions, key=lambda r: r.start - r.end):  # largest first
        owner[region.start : region.end] = [region.id] * (region.end - region.start)
    return owner
