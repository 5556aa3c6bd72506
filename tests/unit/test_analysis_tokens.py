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
    assert result.unit_region == result.region


def test_unit_extent_gives_every_token_of_the_unit_its_region():
    # Region 0 is a statement (chars 0-30) holding a span at 10-15; region 1 is an AT_DISPATCH
    # statement (40-90) around a lambda statement, region 2 (50-60), which wins inside it.
    spans = (
        Span(10, 15, Category.INDEXING, "x" * 5),
        Span(40, 45, Category.BINDING, "y" * 5),
        Span(52, 54, Category.SYNC, "zz"),
    )
    regions = (
        Region(0, 0, 30, "statement", Category.INDEXING, (0,)),
        Region(1, 40, 90, "statement", Category.BINDING, (1,)),
        Region(2, 50, 60, "statement", Category.SYNC, (2,)),
    )
    analysis = Analysis("cu", spans, regions, 1.0, 100)
    offsets = [
        (0, 5),
        (5, 10),
        (10, 15),
        (15, 30),
        (30, 40),
        (40, 45),
        (45, 50),
        (50, 52),
        (52, 54),
        (55, 60),
        (60, 70),
        (90, 99),
        (50, 50),
    ]
    result = align_tokens(analysis, offsets, answer_start=0)
    assert result.region == [-1, -1, 0, -1, -1, 1, -1, -1, 2, -1, -1, -1, -1]
    assert result.unit_region == [0, 0, 0, 0, -1, 1, 1, 2, 2, 2, 1, -1, -1]


def test_a_whole_statement_is_one_region_in_unit_extent(tokenizer):
    answer = (
        "```cuda\n__global__ void k(const float* x, float* out, int n) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) out[i] = 1.0f / (1.0f + expf(-x[i]));\n}\n```"
    )
    analysis = analyze_answer(answer)
    encoding = tokenizer(answer, return_offsets_mapping=True, add_special_tokens=False)
    offsets = [tuple(pair) for pair in encoding["offset_mapping"]]
    result = align_tokens(analysis, offsets, 0)
    statement = "out[i] = 1.0f / (1.0f + expf(-x[i]));"
    at = answer.index(statement)
    inside = [k for k, (a, b) in enumerate(offsets) if at <= a and b <= at + len(statement)]
    # The arithmetic around the index (1.0f, expf, ...) is not sensitive but belongs to the region.
    assert not all(result.sensitive[k] for k in inside)
    assert {result.unit_region[k] for k in inside} == {result.unit_region[inside[0]]} != {-1}


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
    guard_tokens = [text[a:b] for (a, b), c in zip(offsets, result.category) if c == Category.BOUNDS_GUARD]
    assert "".join(guard_tokens) == guard.text == "i < n"
    sync_tokens = "".join(text[a:b] for (a, b), c in zip(offsets, result.category) if c == Category.SYNC)
    assert sync_tokens == " __syncthreads();"  # tokens reach past the span's edges
    # every sensitive token overlaps a span of the analysis, shifted by the answer's offset
    for (a, b), sensitive, region in zip(offsets, result.sensitive, result.region):
        overlapping = [
            i
            for i, span in enumerate(analysis.spans)
            if a < b and a < span.end + answer_start and span.start + answer_start < b
        ]
        assert sensitive == bool(overlapping)
        if sensitive:
            assert overlapping[-1] in analysis.regions[region].span_indices
