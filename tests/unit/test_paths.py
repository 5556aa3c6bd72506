"""The core's cache folders come from one object, read from the environment."""

from __future__ import annotations

from pathlib import Path

from cuset_core.paths import CorePaths


def test_every_cache_folder_lies_under_the_users_cache_named_by_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CUSET_CPU_PCH_DIR", raising=False)
    paths = CorePaths()
    assert paths.cache_root == tmp_path / "cuset"
    assert paths.verify_results == tmp_path / "cuset" / "verify"
    assert paths.cpu_libraries == tmp_path / "cuset" / "cpu_libraries"
    assert paths.cpu_pch == tmp_path / "cuset" / "cpu_pch"


def test_an_unset_or_empty_xdg_cache_home_means_the_home_folders_cache(monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert CorePaths().cache_root == Path.home() / ".cache" / "cuset"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert CorePaths().cache_root == Path.home() / ".cache" / "cuset"


def test_a_shared_prelude_folder_moves_the_preludes_alone(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("CUSET_CPU_PCH_DIR", str(tmp_path / "shared"))
    paths = CorePaths()
    assert paths.cpu_pch == tmp_path / "shared"
    assert paths.verify_results == tmp_path / "xdg" / "cuset" / "verify"
