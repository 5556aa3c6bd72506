"""A warning about a record an upload kept (``File.warnings``): the data validator's finding of
severity warning (``cuset_core.data``), or a record longer than the default token limit. The
files endpoints list them beside the records they concern."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RecordWarning(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "line": 3,
                    "field": "messages[1].content",
                    "code": "no_code_block",
                    "message": "answer has no fenced code block",
                }
            ]
        }
    )

    line: int
    field: str
    code: str
    message: str
