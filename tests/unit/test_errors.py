"""One error type across the service: rows store an ``ErrorInfo`` whose code is an ``ErrorCode``,
a code outside the list is refused where it is written, and every kind of row the API looks up
by id has its ``<kind>_not_found`` code."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import StatementError

from api.errors import not_found
from db.errors import ErrorCode, ErrorInfo
from db.models import Eval
from db.session import session_scope
from tests.integration.job_support import insert_eval


def test_a_rows_error_reads_back_as_the_error_it_was_written(sqlite_settings):
    written = ErrorInfo(code=ErrorCode.WORKER_LOST, message="The worker stopped.")
    insert_eval(sqlite_settings.resolved_database_url, "eval-failed", status="failed", error=written)

    with session_scope(sqlite_settings.resolved_database_url) as session:
        read = session.scalar(select(Eval.error).where(Eval.id == "eval-failed"))

    assert read == written and read.code is ErrorCode.WORKER_LOST and read.param is None


def test_a_code_outside_the_list_is_refused_where_it_is_written(sqlite_settings):
    with pytest.raises(StatementError) as refused:
        insert_eval(
            sqlite_settings.resolved_database_url,
            "eval-typo",
            status="failed",
            error={"code": "worker_lsot", "message": "typo"},
        )
    assert isinstance(refused.value.orig, ValidationError) and "worker_lsot" in str(refused.value.orig)


@pytest.mark.parametrize("kind", ["file", "fine-tuning job", "eval", "model"])
def test_every_kind_the_api_looks_up_by_id_has_its_not_found_code(kind):
    error = not_found(kind, "x-1")
    assert error.status == 404 and error.code.endswith("_not_found") and error.code in set(ErrorCode)
