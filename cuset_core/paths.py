"""Where the core keeps what it builds once and reads many times: converted models, verification
results, tier 2's compiled extensions and precompiled preludes. One object says where, read from
the environment, so the folders are worked out in one place."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class CorePaths(BaseSettings):
    """The core's cache folders, from ``XDG_CACHE_HOME`` (the freedesktop convention: each user's
    cache) and ``CUSET_CPU_PCH_DIR``; read from the environment when built, so build it where
    the folders are needed (tests and operators set the environment per process)."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_ignore_empty=True, populate_by_name=True)

    xdg_cache_home: Path = Field(
        default_factory=lambda: Path.home() / ".cache",
        validation_alias="XDG_CACHE_HOME",
        description="the user's cache folder; the core's folders are under its cuset/",
    )
    cpu_pch_dir: Path | None = Field(
        None,
        validation_alias="CUSET_CPU_PCH_DIR",
        description="tier 2's precompiled preludes, when kept apart (one folder built by another user and "
        "readable by all: the test lanes share theirs); None: cpu_pch under the cache root",
    )

    @property
    def cache_root(self) -> Path:
        """``$XDG_CACHE_HOME/cuset``, by default ``~/.cache/cuset``; converted models sit directly in it."""
        return self.xdg_cache_home / "cuset"

    @property
    def verify_results(self) -> Path:
        """Cached verification results (``cuset_core/verify/cache.py``)."""
        return self.cache_root / "verify"

    @property
    def cpu_libraries(self) -> Path:
        """Tier 2's compiled extensions (``cuset_core/verify/execution/library_cache.py``)."""
        return self.cache_root / "cpu_libraries"

    @property
    def cpu_pch(self) -> Path:
        """Tier 2's precompiled preludes; the sandbox mounts the folder read-only for the harness."""
        return self.cpu_pch_dir or self.cache_root / "cpu_pch"
