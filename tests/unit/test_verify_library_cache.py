"""Tier 2 keeps the extensions it compiled, keyed on the trusted side: what goes in, what comes out,
and that a build side cannot put a library under a key the judge did not plan."""

from __future__ import annotations

import json

import pytest

from cuset_core.verify.execution.judge import _cached_libraries, _hand_over_builds, _hand_over_cached
from cuset_core.verify.execution.library_cache import LibraryCache, library_key
from cuset_core.verify.execution.tier_run import PlannedLibrary, TierSpec
from cuset_core.verify.result import Tier
from cuset_core.verify.settings import SandboxLimits

PRELUDES = ["/cache/cpu_pch/light-0123456789abcdef", "/cache/cpu_pch/full-fedcba9876543210"]
PLANNED = PlannedLibrary("relu_cuset0", "ab" * 32, library_key("ab" * 32, PRELUDES))


def spec_with(cache: LibraryCache | None, planned: tuple[PlannedLibrary, ...] = (PLANNED,)) -> TierSpec:
    return TierSpec(Tier.CPU, "harness", SandboxLimits(), lambda folder: {}, True, planned, cache)


def build_folder_with(tmp_path, module: str, digest: str, data: bytes = b"\x7fELF library"):
    folder = tmp_path / "build"
    folder.mkdir()
    (folder / f"{module}.so").write_bytes(data)
    built = [{"module": module, "digest": digest, "file": f"{module}.so"}]
    (folder / "report.json").write_text(json.dumps({"verdict": "pass", "details": {"built": built}}))
    return folder


def test_the_key_changes_with_the_sources_and_with_the_toolchain():
    assert library_key("ab" * 32, PRELUDES) == PLANNED.key
    assert library_key("cd" * 32, PRELUDES) != PLANNED.key
    assert library_key("ab" * 32, ["/cache/cpu_pch/light-ffffffffffffffff"]) != PLANNED.key


def test_a_planned_library_the_build_side_made_is_kept_and_handed_over_next_time(tmp_path):
    cache = LibraryCache(tmp_path / "cache")
    spec = spec_with(cache)
    assert _cached_libraries(spec) is None
    handed, beyond_bridge = _hand_over_builds(
        spec, build_folder_with(tmp_path, PLANNED.module, PLANNED.digest), tmp_path / "c1"
    )
    assert beyond_bridge is None
    assert [entry.module for entry in handed] == [PLANNED.module]
    assert cache.get(PLANNED.key) == b"\x7fELF library"

    cached = _cached_libraries(spec)
    assert cached is not None
    again = _hand_over_cached(cached, tmp_path / "c2")
    assert [(entry.module, entry.digest) for entry in again] == [(PLANNED.module, PLANNED.digest)]
    assert (tmp_path / "c2" / again[0].file).read_bytes() == b"\x7fELF library"


@pytest.mark.parametrize(
    ("module", "digest"),
    [(PLANNED.module, "ef" * 32), ("other_cuset0", PLANNED.digest)],
    ids=["another digest", "another module"],
)
def test_a_library_the_judge_did_not_plan_is_handed_over_but_never_kept(tmp_path, module, digest):
    cache = LibraryCache(tmp_path / "cache")
    handed, _ = _hand_over_builds(spec_with(cache), build_folder_with(tmp_path, module, digest), tmp_path / "c")
    assert len(handed) == 1  # the candidate side matches it against its own unit, or rebuilds
    assert not (tmp_path / "cache").exists()


def test_the_build_side_runs_unless_every_planned_library_is_cached(tmp_path):
    cache = LibraryCache(tmp_path / "cache")
    second = PlannedLibrary("gelu_cuset1", "cd" * 32, library_key("cd" * 32, PRELUDES))
    cache.put(PLANNED.key, b"one")
    assert _cached_libraries(spec_with(cache, (PLANNED, second))) is None
    cache.put(second.key, b"two")
    cached = _cached_libraries(spec_with(cache, (PLANNED, second)))
    assert cached is not None and [data for _, data in cached] == [b"one", b"two"]
    assert _cached_libraries(spec_with(None)) is None and _cached_libraries(spec_with(cache, ())) is None
