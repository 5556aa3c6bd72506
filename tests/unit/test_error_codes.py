"""Every error code the API can return is one snake_case word, as clients match them."""

from __future__ import annotations

import re

from api.errors import not_found
from db.errors import ErrorCode


def test_every_error_code_is_snake_case():
    assert [code.value for code in ErrorCode if not re.fullmatch(r"[a-z][a-z0-9_]*", code.value)] == []


def test_a_missing_fine_tuning_job_is_fine_tuning_job_not_found():
    assert (
        not_found("fine-tuning job", "ftjob-x").code
        == ErrorCode.FINE_TUNING_JOB_NOT_FOUND
        == "fine_tuning_job_not_found"
    )
