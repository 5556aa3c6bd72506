"""Pull code out of a model's answer: the first fenced code block is the one that is scored."""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*\n", re.MULTILINE)


@dataclass(frozen=True)
class CodeBlock:
    """A fenced block: its language tag, its body, and where the body starts in the answer."""

    language: str
    code: str
    start: int  # character offset of ``code`` inside the answer
    closed: bool  # False when the answer ended before the closing fence (truncated generation)


def first_code_block(answer: str) -> CodeBlock | None:
    """The first fenced code block of ``answer`` (an unclosed one runs to the end), or None."""
    opening = _FENCE.search(answer)
    if opening is None:
        return None
    fence, language = opening.group(1), opening.group(2).lower()
    body_start = opening.end()
    closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
    end = closing.search(answer, body_start)
    if end is None:
        return CodeBlock(language, answer[body_start:], body_start, closed=False)
    return CodeBlock(language, answer[body_start : end.start()], body_start, closed=True)


def answer_code(answer: str) -> CodeBlock:
    """The code to score in an answer: its first fenced block, or the whole text if unfenced."""
    block = first_code_block(answer)
    if block is not None:
        return block
    return CodeBlock("", answer, 0, closed=True)
