"""A decoded answer as a Generation row shows it: cut at the request's first stop string, its
code extracted for ``/v1/generate``; a partial answer without a tail that could begin a stop
string."""

from __future__ import annotations

from cuset_core.analysis.extract import answer_code
from cuset_core.generation.sampling import GeneratedText
from db.generations import GenerationSample
from db.statuses import GenerationKind
from service.generation_claims import Claimed


def finished_sample(row: Claimed, sample: GenerationSample, generated: GeneratedText) -> GenerationSample:
    """``sample`` with its decoded answer: stop strings applied, code extracted for /v1/generate."""
    text, stopped = cut_at_stop(generated.text, row.request.stop)
    return sample.model_copy(
        update={
            "text": text,
            "finish_reason": "stop" if stopped else generated.finish_reason,
            "prompt_tokens": generated.prompt_tokens,
            "completion_tokens": generated.completion_tokens,
            "code": answer_code(text).code if row.kind == GenerationKind.GENERATE else None,
        }
    )


def cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """``text`` up to the first stop string (excluded), and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stops) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


def shown(partial: str, stops: list[str]) -> str:
    """What of a partial answer may be shown: up to a stop string, and without a tail that could
    be the start of one (sent once the next tokens tell)."""
    cut, stopped = cut_at_stop(partial, stops)
    holdback = max((len(s) for s in stops), default=1) - 1
    return cut if stopped else cut[: len(cut) - holdback]
