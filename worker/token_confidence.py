"""How sure a model is of each token of a training record's answer: one forward pass over the
record, rendered and encoded exactly as training sees it (``cuset_core.data.encode_record``),
gives p, the model's probability of each reference answer token
(``cuset_core.evaluation.confidence_report.record_confidence``); the core's token alignment says
which sensitive region each token falls in. The answer stored is an ``AnswerScores``: per token
its answer character offsets (half-open) and p, per region (index = the analysis region id) its
mean and min p."""

from __future__ import annotations

from cuset_core.data import IGNORE_INDEX, EncodedRecord, Record, encode_record
from cuset_core.evaluation.confidence_report import record_confidence
from cuset_core.evaluation.confidence_settings import ReportSettings
from db.confidence_scores import AnswerScores, RegionScore, TokenScore

# The confidence report's own limit: longer records are measured on their first tokens only.
MAX_TOKENS: int = ReportSettings.model_fields["max_tokens"].default


def token_confidence(model, tokenizer, record: Record) -> AnswerScores:
    """The stored answer: every answer token with p, and every region's mean and min p."""
    encoded = encode_record(record, tokenizer, MAX_TOKENS)
    measured = record_confidence(model, encoded, record.answer, record.line)
    if measured is None:
        return AnswerScores()
    p = [min(max(value, 0.0), 1.0) for value in measured.p]  # float32 rounding can step past 1
    tokens = [
        TokenScore(start=start, end=end, p=value)
        for (start, end), value in zip(_answer_offsets(encoded), p)
        if end > start  # the end-of-turn token is supervised but lies outside the answer
    ]
    return AnswerScores(tokens=tokens, regions=_region_stats(p, measured.region))


def _answer_offsets(encoded: EncodedRecord) -> list[tuple[int, int]]:
    """Answer character spans of the tokens ``record_confidence`` scores, in its order.

    It scores the supervised positions from ``max(first supervised, 1)`` on (token 0 has no
    prediction); spans are clipped to the answer, so a token straddling its edge keeps its
    answer part only.
    """
    supervised = [t for t, label in enumerate(encoded.labels) if label != IGNORE_INDEX]
    first = max(supervised[0], 1)
    length = encoded.answer_end - encoded.answer_start
    spans = []
    for t in supervised:
        if t < first:
            continue
        start, end = (offset - encoded.answer_start for offset in encoded.offsets[t])
        spans.append((min(max(start, 0), length), min(max(end, 0), length)))
    return spans


def _region_stats(p: list[float], regions: list[int]) -> list[RegionScore]:
    """Mean and min p of each region's tokens (``regions[k]``: region id of token k, -1 for
    none); regions without a scored token are left out."""
    by_region: dict[int, list[float]] = {}
    for value, region in zip(p, regions):
        if region >= 0:
            by_region.setdefault(region, []).append(value)
    return [
        RegionScore(index=region, mean_p=sum(values) / len(values), min_p=min(values), tokens=len(values))
        for region, values in sorted(by_region.items())
    ]
