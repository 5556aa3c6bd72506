"""Integration tests: the API, workers, Postgres and Redis, all real (fixtures in tests/service.py)."""

import pytest

# Helpers tests import by name (fixtures come from the plugin, never from here).
from tests.service import PG_ADMIN_URL, REPO, WorkerProcess, _free_port, service_env, wait_for  # noqa: F401


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
