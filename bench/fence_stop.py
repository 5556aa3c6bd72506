"""Decoding saved by stopping an answer at the line closing its first code block (what
``/v1/generate`` does, :mod:`cuset_core.generation.fence_stop`), measured side by side in one run.

Decodes the demo problems held out of training (the KernelBench prompt, greedy, one batch) with
and without the stop, and prints one JSON line: completion tokens and seconds of each, and
whether every stopped answer is the start of the full one (it must be: the stop only ends
decoding early).

    .venv/bin/python bench/fence_stop.py [--model SPEC] [--max-new-tokens N]
"""

from __future__ import annotations

import argparse
import json
import time

from cuset_core.demo import HELD_OUT, demo_problems
from cuset_core.generation.prompts import build_messages
from cuset_core.generation.sampling import generate
from cuset_core.models import inference_dtype, load_model, place_for_inference


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cuset-ew-135m", help="model spec (default: the shipped adapter)")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    args = parser.parse_args()
    model, tokenizer = load_model(args.model, inference_dtype())
    model = place_for_inference(model)
    conversations = [build_messages(p.problem_code, "kernelbench") for p in demo_problems() if p.id in HELD_OUT]
    runs = {}
    for stop in (False, True):
        start = time.perf_counter()
        answers = [
            row[0]
            for row in generate(model, tokenizer, conversations, max_new_tokens=args.max_new_tokens, stop_at_fence=stop)
        ]
        runs[stop] = (answers, time.perf_counter() - start)
    (full, full_s), (cut, cut_s) = runs[False], runs[True]
    print(
        json.dumps(
            {
                "model": args.model,
                "problems": len(conversations),
                "max_new_tokens": args.max_new_tokens,
                "completion_tokens": [a.completion_tokens for a in full],
                "completion_tokens_stopped": [a.completion_tokens for a in cut],
                "answers_stopped_early": sum(a.completion_tokens < b.completion_tokens for a, b in zip(cut, full)),
                "tokens_saved_share": round(
                    1 - sum(a.completion_tokens for a in cut) / sum(a.completion_tokens for a in full), 3
                ),
                "seconds": round(full_s, 1),
                "seconds_stopped": round(cut_s, 1),
                "stopped_answers_are_prefixes": all(b.text.startswith(a.text) for a, b in zip(cut, full)),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
