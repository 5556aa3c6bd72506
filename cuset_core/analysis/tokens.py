"""Map an analysis (answer character spans) onto the tokens of a rendered text."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from cuset_core.analysis.categories import Category
from cuset_core.analysis.spans import Analysis


@dataclass
class TokenSensitivity:
    """One entry per token: is it sensitive, its span's category, its region id (-1: none)."""

    sensitive: list[bool]
    category: list[Category | None]
    region: list[int]


def align_tokens(
    analysis: Analysis, offsets: Sequence[tuple[int, int]], answer_start: int
) -> TokenSensitivity:
    """Token-level sensitivity from a fast tokenizer's character ``offsets``.

    ``offsets[k]`` is the half-open character span of token k in the rendered text (a chat
    template, say) in which the analysed answer starts at character ``answer_start``. A token is
    sensitive when it overlaps a sensitive span; its category and region are those of the last
    span it overlaps. Empty offsets (special tokens) are never sensitive.
    """
    spans = analysis.spans
    starts = [span.start for span in spans]
    region_of = [-1] * len(spans)
    for region in analysis.regions:
        for index in region.span_indices:
            region_of[index] = region.id
    sensitive: list[bool] = []
    category: list[Category | None] = []
    region: list[int] = []
    for token_start, token_end in offsets:
        start, end = int(token_start) - answer_start, int(token_end) - answer_start
        # Spans are sorted and disjoint, so their ends are sorted too: only the last span that
        # starts before the token ends can overlap it.
        index = bisect.bisect_left(starts, end) - 1 if end > start else -1
        if index >= 0 and spans[index].end > start:
            sensitive.append(True)
            category.append(spans[index].category)
            region.append(region_of[index])
        else:
            sensitive.append(False)
            category.append(None)
            region.append(-1)
    return TokenSensitivity(sensitive, category, region)
