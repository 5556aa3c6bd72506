"""Shapes shared by every domain: OpenAI's list envelope and deletion status."""

from __future__ import annotations

from typing import Generic, Literal, TypeVar

from pydantic import BaseModel

Item = TypeVar("Item")


class ListPage(BaseModel, Generic[Item]):
    """A page of a list, newest first; pass the last id as ``after`` for the next page."""

    object: Literal["list"] = "list"
    data: list[Item]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None


class Deleted(BaseModel):
    id: str
    object: str
    deleted: bool = True
