"""Decoding saved by stopping an answer at the line closing its first code block (what
``/v1/generate`` does, :mod:`cuset_core.generation.fence_stop`); prints one JSON line.

Live (default): decodes the demo problems held out of training (the KernelBench prompt, greedy,
one batch) with and without the stop, side by side in one run: completion tokens and seconds of
each, and whether every stopped answer is the start of the full one (it must be).

``--reports``: over answers already decoded, the ``samples`` of ``cuset eval`` results files: the
share of their completion tokens that came after the line closing the first code block (what
the stop would not have decoded), counted with the SmolLM2 tokenizer.

    .venv/bin/python bench/fence_stop.py [--model SPEC] [--max-new-tokens N]
    .venv/bin/python bench/fence_stop.py --reports experiments/comparison/small/*/eval/results.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from cuset_core.generation.fence_stop import fence_cut


def live(model_spec: str, max_new_tokens: int) -> dict:
    from cuset_core.demo import HELD_OUT, demo_problems
    from cuset_core.generation.prompts import build_messages
    from cuset_core.generation.sampling import generate
    from cuset_core.models import inference_dtype, load_model, place_for_inference

    model, tokenizer = load_model(model_spec, inference_dtype())
    model = place_for_inference(model)
    conversations = [build_messages(p.problem_code, "kernelbench") for p in demo_problems() if p.id in HELD_OUT]
    runs = {}
    for stop in (False, True):
        start = time.perf_counter()
        rows = generate(model, tokenizer, conversations, max_new_tokens=max_new_tokens, stop_at_fence=stop)
        runs[stop] = ([row[0] for row in rows], time.perf_counter() - start)
    (full, full_s), (cut, cut_s) = runs[False], runs[True]
    return {
        "model": model_spec,
        "problems": len(conversations),
        "max_new_tokens": max_new_tokens,
        "completion_tokens": [a.completion_tokens for a in full],
        "completion_tokens_stopped": [a.completion_tokens for a in cut],
        "tokens_saved_share": round(
            1 - sum(a.completion_tokens for a in cut) / sum(a.completion_tokens for a in full), 3
        ),
        "seconds": round(full_s, 1),
        "seconds_stopped": round(cut_s, 1),
        "stopped_answers_are_prefixes": all(b.text.startswith(a.text) for a, b in zip(cut, full)),
    }


def from_reports(paths: list[Path]) -> dict:
    from cuset_core.models import BUNDLED_MODEL, load_tokenizer

    tokenizer = load_tokenizer(BUNDLED_MODEL)
    samples = [s for path in paths for s in json.loads(path.read_text())["samples"]]
    decoded = after = closed = 0
    for sample in samples:
        tokens = tokenizer.encode(sample["answer"], add_special_tokens=False)
        count = sample.get("completion_tokens") or len(tokens)
        cut = fence_cut(tokens, tokenizer)
        decoded += count
        if cut is not None:
            closed, after = closed + 1, after + max(0, count - cut)
    return {
        "reports": len(paths),
        "samples": len(samples),
        "closed_a_block": closed,
        "completion_tokens": decoded,
        "after_the_closing_fence": after,
        "tokens_saved_share": round(after / decoded, 3) if decoded else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cuset-ew-135m", help="model spec (default: the shipped adapter)")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--reports", type=Path, nargs="+", help="cuset eval results.json files instead of decoding")
    args = parser.parse_args()
    print(json.dumps(from_reports(args.reports) if args.reports else live(args.model, args.max_new_tokens)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
