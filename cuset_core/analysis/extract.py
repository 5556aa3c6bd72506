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
    fences = _first_fences(answer)
    if fences is None:
        return None
    opening, end = fences
    language, body_start = opening.group(2).lower(), opening.end()
    if end is None:
        return CodeBlock(language, answer[body_start:], body_start, closed=False)
    return CodeBlock(language, answer[body_start : end.start()], body_start, closed=True)


def closing_fence_end(text: str) -> int | None:
    """Where the line closing the first fenced block of ``text`` ends (just past its newline),
    or None while that line is not complete: a text still being decoded may go on after a
    bare fence (a closing fence is a line of fence characters and blanks only)."""
    fences = _first_fences(text)
    if fences is None or fences[1] is None:
        return None
    line_end = text.find("\n", fences[1].end())
    return None if line_end < 0 else line_end + 1


def _first_fences(answer: str) -> tuple[re.Match[str], re.Match[str] | None] | None:
    """The opening fence of the first block and its closing fence (None: unclosed); None: no block."""
    opening = _FENCE.search(answer)
    if opening is None:
        return None
    fence = opening.group(1)
    closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
    return opening, closing.search(answer, opening.end())


def answer_code(answer: str) -> CodeBlock:
    """The code to score in an answer: its first fenced block, or the whole text if unfenced."""
    block = first_code_block(answer)
    if block is not None:
        return block
    return CodeBlock("", answer, 0, closed=True)
