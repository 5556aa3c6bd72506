"""Queries every router makes: an owner's row by id (404 otherwise), an owner's file named in a
request body (400 naming the field otherwise) and keyset pages in OpenAI's list shape, where
``after`` names the last item of the previous page."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol, TypeVar

from sqlalchemy import Select, select, tuple_
from sqlalchemy.orm import InstrumentedAttribute, Session

from api.errors import bad_request, not_found
from api.schemas.common import ListPage
from db.errors import ErrorCode
from db.models import File


class _Listed(Protocol):
    """An item of a list page: its id is the cursor of the next page."""

    id: str


Row = TypeVar("Row")
Page = TypeVar("Page", bound=ListPage)


def owned_or_404(
    session: Session,
    model: type[Row],
    row_id: str,
    owner: str,
    kind: str,
    *,
    param: str | None = None,
    for_update: bool = False,
) -> Row:
    """The row of ``model`` with id ``row_id`` that ``owner`` owns (locked when ``for_update``);
    404 ``<kind>_not_found`` otherwise, so unknown and foreign ids look the same."""
    query = select(model).where(model.id == row_id, model.owner == owner)  # type: ignore[attr-defined]
    row = session.scalar(query.with_for_update() if for_update else query)
    if row is None:
        raise not_found(kind, row_id, param=param)
    return row


def named_file(session: Session, owner: str, file_id: str, purposes: Collection[str], param: str) -> File:
    """The file ``file_id`` of ``owner`` with one of ``purposes``, named by the request body field
    ``param``; 400 naming that field otherwise (``file_not_found``: unknown and foreign ids look
    the same; ``invalid_file_purpose``)."""
    file = session.scalar(select(File).where(File.id == file_id, File.owner == owner))
    if file is None:
        raise bad_request(f"No file found with id '{file_id}'.", param=param, code=ErrorCode.FILE_NOT_FOUND)
    if file.purpose not in purposes:
        wanted = " or ".join(f"'{purpose}'" for purpose in sorted(purposes))
        raise bad_request(
            f"File '{file_id}' has purpose '{file.purpose}'; {param} needs a file with purpose {wanted}.",
            param=param,
            code=ErrorCode.INVALID_FILE_PURPOSE,
        )
    return file


def cursor_anchor(session: Session, query: Select, message: str, code: ErrorCode = ErrorCode.INVALID_CURSOR) -> Any:
    """The row an ``after`` cursor names (``query`` selects it); 400 naming ``after`` when none."""
    anchor = session.scalar(query)
    if anchor is None:
        raise bad_request(message, param="after", code=code)
    return anchor


def keyset_rows(
    session: Session,
    query: Select,
    keys: Sequence[InstrumentedAttribute],
    after: Sequence[Any] | None,
    limit: int,
    *,
    descending: bool = True,
) -> Sequence[Any]:
    """Up to ``limit + 1`` rows of ``query`` in the order of ``keys`` (a unique key; descending
    or ascending), starting past the row whose key values are ``after``; the extra row only
    tells whether more follow."""
    if after is not None:
        key, anchor = (keys[0], after[0]) if len(keys) == 1 else (tuple_(*keys), tuple_(*after))
        query = query.where(key < anchor if descending else key > anchor)
    ordering = [key.desc() for key in keys] if descending else list(keys)
    return session.scalars(query.order_by(*ordering).limit(limit + 1)).all()


def list_page(page: type[Page], rows: Sequence[Row], limit: int, view: Callable[[Row], _Listed]) -> Page:
    """The list envelope ``page`` (``ListPage`` or a subclass) of ``rows`` as fetched by
    ``keyset_rows`` (at most one past ``limit``), each item made by ``view``."""
    data = [view(row) for row in rows[:limit]]
    return page(
        data=data,
        has_more=len(rows) > limit,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
    )
