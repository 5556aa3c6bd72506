"""A chat message's content as OpenAI sends it: a string, or typed parts of which the text ones
are read."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api.schemas.inference import ChatMessage


def test_text_parts_are_joined_in_order_and_other_parts_dropped():
    message = ChatMessage.model_validate(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Write a kernel "},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "text", "text": "for relu."},
            ],
        }
    )

    assert message.text() == "Write a kernel for relu."


def test_a_content_part_without_its_type_is_refused():
    with pytest.raises(ValidationError, match="type"):
        ChatMessage.model_validate({"role": "user", "content": [{"text": "Write a kernel."}]})
