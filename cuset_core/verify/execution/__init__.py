"""The execution machinery tiers 2 and 3 share: the judge and its two sandboxed sides (tier runs,
sides started ahead, reference runs shared by a batch), what crosses between them (transfer),
what runs inside a side (harness_side, binding, fallback) and the compiled-library cache."""
