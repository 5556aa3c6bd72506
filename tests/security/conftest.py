"""Fixtures the tier-2 attack suites share."""

from __future__ import annotations

import pytest

from cuset_core.verify.execution.library_cache import LibraryCache


@pytest.fixture(scope="module")
def libraries(tmp_path_factory) -> LibraryCache:
    """One library cache per test module: a module's candidates share one extension, compiled once."""
    return LibraryCache(tmp_path_factory.mktemp("libraries"))
