"""CUDA sensitivity: find CUDA code in answers, parse it, mark sensitive spans and regions, align to tokens.

- ``extract``: the fenced code block of an answer that is scored;
- ``sources``: the CUDA/C++ sources of an answer and their offsets in it;
- ``categories``: the categories and the names that identify them;
- ``scan``: tree-sitter-cuda parse of one source and its sensitive spans;
- ``analyze``: ``analyze_answer(answer) -> Analysis`` (types in ``spans``);
- ``tokens``: ``align_tokens`` maps an analysis onto tokenizer offsets.

A model's confidence on these regions (it runs a model) is ``cuset_core.evaluation.confidence_report``.
"""
