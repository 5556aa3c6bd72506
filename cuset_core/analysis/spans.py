"""The result types of the sensitivity analysis: spans, regions and the per-answer analysis."""

from __future__ import annotations

from dataclasses import dataclass

from cuset_core.analysis.categories import Category

SCHEMA = "cuset.analysis/1"


@dataclass(frozen=True)
class Span:
    """A CUDA-sensitive piece of the answer: half-open character offsets ``[start, end)``."""

    start: int
    end: int
    category: Category
    text: str  # == answer[start:end]


@dataclass(frozen=True)
class Region:
    """The smallest syntactic unit holding sensitive spans, in answer character offsets.

    ``kind`` is one of ``statement``, ``launch``, ``declaration``, ``if_header``,
    ``loop_header``, ``switch_header``, ``kernel_signature``, ``function_signature``,
    ``extension_call`` (the Python ``load_inline`` call) or ``expression`` (no enclosing unit).
    Headers cover the condition, not the body. ``span_indices`` index ``Analysis.spans``.
    """

    id: int
    start: int
    end: int
    kind: str
    category: Category  # the first of its spans' categories in ``categories.DOMINANCE``
    span_indices: tuple[int, ...]


@dataclass(frozen=True)
class Analysis:
    """Sensitive spans and regions of one answer.

    ``spans`` are sorted by start and do not overlap; every span belongs to exactly one region.
    ``regions`` are sorted by start and ``regions[k].id == k``. Regions do not overlap, except
    that an ``AT_DISPATCH_*`` statement's region holds the statements of its lambda.
    ``parse_coverage`` is the share (0..1) of the parsed CUDA/C++ source characters that lie
    outside tree-sitter ERROR nodes and outside the nodes tree-sitter had to complete with a
    MISSING token; it is 0.0 when the answer holds no CUDA code (``cuda_chars == 0``).
    """

    language: str  # "python" (load_inline) or "cu"
    spans: tuple[Span, ...]
    regions: tuple[Region, ...]
    parse_coverage: float
    cuda_chars: int  # characters of CUDA and C++ source parsed

    def to_json(self) -> dict:
        """The stable JSON form (schema ``cuset.analysis/1``); offsets are answer characters."""
        return {
            "schema": SCHEMA,
            "language": self.language,
            "cuda_chars": self.cuda_chars,
            "parse_coverage": round(self.parse_coverage, 6),
            "spans": [
                {"start": s.start, "end": s.end, "category": s.category.value, "text": s.text} for s in self.spans
            ],
            "regions": [
                {
                    "id": r.id,
                    "start": r.start,
                    "end": r.end,
                    "kind": r.kind,
                    "category": r.category.value,
                    "span_indices": list(r.span_indices),
                }
                for r in self.regions
            ],
        }
