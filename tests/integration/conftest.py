"""Integration tests: the API, workers, Postgres and Redis, all real (fixtures in tests/real_service.py)."""

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
