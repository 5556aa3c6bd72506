"""Token alignment of an analysis, including an answer inside the SmolLM2 chat template."""

from __future__ import annotations

from cuset_core.analysis.analyze import analyze_answer
from cuset_core.analysis.categories import Category
from cuset_core.analysis.spans import Analysis, Region, Span
from cuset_core.analysis.tokens import align_tokens

ANSWER = """```cuda
__global__ void copy(const float* a, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i];
    __syncthreads();
}
```"""


def _analysis(spans: list[Span]) -> Analysis:
    regions = tuple(Region(i, s.start, s.end, "statement", s.category, (i,)) for i, s in enumerate(spans))
    return Analysis("cu", tuple(spans), regions, 1.0, 100)


def test_tokens_overlapping_a_span_are_sensitive():
    analysis = _analysis([Span(10, 15, Category.SYNC, "x" * 5), Span(20, 22, Category.WARP, "yy")])
    # rendered text: the answer starts at 100; the last token is a special token (empty offsets)
    offsets = [(0, 50), (105, 110), (108, 111), (114, 116), (115, 120), (119, 121), (121, 130), (140, 140)]
    result = align_tokens(analysis, offsets, answer_start=100)
    assert result.sensitive == [False, False, True, True, False, True, True, False]
    assert result.category == [None, None, Category.SYNC, Category.SYNC, None, Category.WARP, Category.WARP, None]
    assert result.region == [-1, -1, 0, 0, -1, 1, 1, -1]


def test_alignment_inside_the_chat_template(tokenizer):
    analysis = analyze_answer(ANSWER)
    messages = [
        {"role": "user", "content": "Write a CUDA copy kernel with __syncthreads()."},
        {"role": "assistant", "content": ANSWER},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    answer_start = text.index(ANSWER)
    encoding = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    offsets = [tuple(pair) for pair in encoding["offset_mapping"]]
    result = align_tokens(analysis, offsets, answer_start)

    assert len(result.sensitive) == len(offsets)
    # the prompt mentions __syncthreads() too, but only answer tokens can be sensitive
    assert not any(s for s, (a, _) in zip(result.sensitive, offsets) if a < answer_start)
    guard = next(span for span in analysis.spans if span.category == Category.BOUNDS_GUARD)
    guard_tokens = [
        text[a:b] for (a, b), c in zip(offsets, result.category) if c == Category.BOUNDS_GUARD
    ]
    assert "".join(guard_tokens) == guard.text == "i < n"
    sync_tokens = "".join(text[a:b] for (a, b), c in zip(offsets, result.category) if c == Category.SYNC)
    assert sync_tokens == " __syncthreads();"  # tokens reach past the span's edges
    # every sensitive token overlaps a span of the analysis, shifted by the answer's offset
    for (a, b), sensitive, region in zip(offsets, result.sensitive, result.region):
        overlapping = [
            i for i, span in enumerate(analysis.spans)
            if a < b and a < span.end + answer_start and span.start + answer_start < b
        ]
        assert sensitive == bool(overlapping)
        if sensitive:
            assert overlapping[-1] in analysis.regions[region].span_indices
