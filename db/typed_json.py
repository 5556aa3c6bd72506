"""A JSON column that holds one typed value: written from, and read back as, a pydantic model (or
any type pydantic validates: dataclasses, lists of models, unions). Rows then carry the type the
code uses, and a value that does not fit fails where it is written instead of where it is read.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import JSON
from sqlalchemy.types import TypeDecorator


class TypedJSON(TypeDecorator):
    """JSON in the database, ``value_type`` in Python (``None`` stays SQL NULL)."""

    impl = JSON
    cache_ok = True

    def __init__(self, value_type: Any) -> None:
        super().__init__(none_as_null=True)
        self.value_type = value_type  # read by SQLAlchemy's statement cache key (cache_ok)
        self._adapter = TypeAdapter(value_type)

    def process_bind_param(self, value: Any, dialect) -> Any:
        return None if value is None else self._adapter.dump_python(self._adapter.validate_python(value), mode="json")

    def process_result_value(self, value: Any, dialect) -> Any:
        return None if value is None else self._adapter.validate_python(value)
