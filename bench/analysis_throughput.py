"""Throughput of the CUDA sensitivity analysis on the shared KernelBench answers.

Times ``analyze_answer`` plus ``align_tokens`` (what training adds per sample on top of
tokenising) over every answer of ``kernelbench_sft_train.parquet``, tokenised with the SmolLM2
tokenizer beforehand, and prints one JSON line. Target: >= 50x training tokens/s (training on
this CPU runs at ~100-200 tokens/s, so >= 10,000 tokens/s).

    .venv/bin/python bench/analysis_throughput.py [--limit N] [--data PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from cuset_core.analysis.analyze import analyze_answer
from cuset_core.analysis.tokens import align_tokens
from cuset_core.models import BUNDLED_MODEL, load_tokenizer

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("CUSET_SHARED_DATA", REPO.parent / "shared" / "data"))
DEFAULT_DATA = SHARED_DATA / "kernelbench_sft_train.parquet"
TARGET_TOKENS_PER_S = 10_000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="KernelBench-style parquet")
    parser.add_argument("--limit", type=int, default=None, help="answers to use (default: all)")
    args = parser.parse_args()
    if not args.data.is_file():
        print(f"error: shared data not found: {args.data} (set CUSET_SHARED_DATA or --data)", file=sys.stderr)
        return 2
    answers = pq.read_table(args.data, columns=["answer"]).column("answer").to_pylist()[: args.limit]
    tokenizer = load_tokenizer(BUNDLED_MODEL)
    encodings = [tokenizer(a, add_special_tokens=False, return_offsets_mapping=True) for a in answers]
    offsets = [[tuple(pair) for pair in e["offset_mapping"]] for e in encodings]

    started = time.perf_counter()
    sensitive = with_cuda = 0
    coverage = 0.0
    for answer, token_offsets in zip(answers, offsets):
        analysis = analyze_answer(answer)
        sensitivity = align_tokens(analysis, token_offsets, 0)
        sensitive += sum(sensitivity.sensitive)
        if analysis.cuda_chars:
            with_cuda += 1
            coverage += analysis.parse_coverage
    seconds = time.perf_counter() - started

    tokens = sum(len(o) for o in offsets)
    rate = tokens / seconds
    print(
        json.dumps(
            {
                "tokens_per_s": round(rate),
                "records": len(answers),
                "tokens": tokens,
                "seconds": round(seconds, 3),
                "chars_per_s": round(sum(map(len, answers)) / seconds),
                "records_with_cuda": with_cuda,
                "sensitive_token_share": round(sensitive / tokens, 4) if tokens else None,
                "mean_parse_coverage": round(coverage / with_cuda, 6) if with_cuda else None,
                "target_tokens_per_s": TARGET_TOKENS_PER_S,
                "meets_target": rate >= TARGET_TOKENS_PER_S,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
