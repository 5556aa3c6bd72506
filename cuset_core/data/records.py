"""The one record type every dataset format loads into: a chat whose last turn is the answer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Role = Literal["system", "user", "assistant"]


class Message(BaseModel):
    """One chat turn."""

    role: Role
    content: str


class Record(BaseModel):
    """A training sample: the conversation, where it came from, and how to group it.

    ``messages`` ends with the assistant answer that training supervises; everything before it
    is the prompt. ``line`` is the 1-based JSONL line or table row it was read from.
    """

    messages: list[Message]
    line: int
    group: str | None = None  # split group, e.g. "1/23" for (level, problem)
    problem: str | None = None  # KernelBench reference code (class Model ...) when known
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def answer(self) -> str:
        """The supervised assistant answer (the last message)."""
        return self.messages[-1].content

    @property
    def prompt_messages(self) -> list[Message]:
        """Every message before the answer."""
        return self.messages[:-1]

    def to_chat_row(self) -> dict[str, Any]:
        """The record as a chat-format JSONL row: ``messages``, plus ``group`` and ``reference``
        (the problem code) when known. ``load_records`` reads such rows back into equal records
        (apart from ``line`` and ``meta``).
        """
        row: dict[str, Any] = {"messages": [m.model_dump() for m in self.messages]}
        if self.group is not None:
            row["group"] = self.group
        if self.problem is not None:
            row["reference"] = self.problem
        return row
