"""Schemathesis against the app's own OpenAPI schema, with auth on and a valid key: every case
must get a non-5xx answer that conforms to the schema (documented status, content type and
body). The CI pass is bounded (``CUSET_FUZZ_CASES`` cases in all, default 150, spread over the
operations, half valid and half invalid requests); bench/fuzz_long.py runs the same pass with
more cases.

The three decoding endpoints are left out: a valid request there waits for a worker to decode
(up to ``generation_timeout_s``), which would spend the bound on waiting; their request
validation is covered by the inference and security tests.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api.main import create_app
from tests.integration.security_support import bearer, new_key, secure_settings

TOTAL_CASES = int(os.environ.get("CUSET_FUZZ_CASES", "150"))
WAITING_OPERATIONS = {("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("POST", "/v1/generate")}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def fuzz_app(service_settings):
    """The app with auth on; its messages go to queues of their own that no worker reads."""
    return create_app(secure_settings(service_settings, broker_key_prefix=f"{service_settings.broker_key_prefix}fuzz:"))


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:200]


def test_fuzzed_requests_get_no_server_error_and_conform_to_the_schema(fuzz_app, database_url):
    headers = bearer(new_key(database_url))
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)
    operations = [result.ok() for result in schema.get_all_operations()]
    operations = [op for op in operations if (op.method.upper(), op.path) not in WAITING_OPERATIONS]
    per_mode = max(1, TOTAL_CASES // (2 * len(operations)))
    statuses: Counter[int] = Counter()
    failures: Counter[str] = Counter()
    server_errors: list[str] = []
    started = time.monotonic()

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=per_mode,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def run(case) -> None:
                response = case.call(headers=headers)
                statuses[response.status_code] += 1
                label = f"{operation.method.upper()} {operation.path}"  # noqa: B023 - run() is called within this iteration
                if response.status_code >= 500:
                    server_errors.append(
                        f"{label} -> {response.status_code}: {response.text[:200]} "
                        f"(path {case.path_parameters}, query {case.query}, body {str(case.body)[:200]})"
                    )
                try:
                    case.validate_response(response, checks=CHECKS, headers=headers)
                except Exception as error:  # noqa: BLE001 - every kind of check failure is counted
                    failures[f"{label}: {_first_line(error)}"] += 1

            try:
                run()
            except Unsatisfiable:
                continue  # nothing to negate (an operation without parameters or body)

    cases = sum(statuses.values())
    elapsed = time.monotonic() - started
    print(
        f"\nfuzz: {len(operations)} operations, {cases} cases in {elapsed:.1f} s; statuses {dict(sorted(statuses.items()))}; "
        f"server errors {len(server_errors)}; schema failures {sum(failures.values())}"
    )
    for line in server_errors[:20]:
        print("  5xx:", line)
    for line, count in failures.most_common(20):
        print(f"  check x{count}: {line}")
    assert cases >= min(TOTAL_CASES // 2, 2 * len(operations))
    assert server_errors == []
    assert not failures, failures.most_common(10)
