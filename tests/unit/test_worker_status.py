"""Each worker's sandbox entry for /readyz: written at start, removed by its own worker only."""

from __future__ import annotations

import json

from db.settings import Settings
from db.worker_status import forget_sandbox, record_sandbox, sandbox_states


def test_a_worker_records_its_sandbox_state_and_forgets_it_at_shutdown(tmp_path):
    settings = Settings(data_dir=tmp_path)
    record_sandbox(settings, "gpu0@host", isolated=False, reason="bwrap missing", allow_unisolated=False)
    assert sandbox_states(settings)["gpu0@host"]["state"] == "refusing"
    forget_sandbox(settings, "gpu0@host")
    assert sandbox_states(settings) == {}


def test_shutting_down_never_removes_the_entry_of_another_process_of_the_same_name(tmp_path):
    settings = Settings(data_dir=tmp_path)
    record_sandbox(settings, "gpu0@host", isolated=True, reason="", allow_unisolated=False)
    entry = settings.artifacts / "workers" / "gpu0@host.json"
    entry.write_text(json.dumps({**json.loads(entry.read_text()), "pid": -1}))  # a later worker's entry
    forget_sandbox(settings, "gpu0@host")
    assert sandbox_states(settings)["gpu0@host"]["state"] == "isolated"


def test_a_worker_whose_tier_2_side_cannot_run_is_not_ready_with_the_reason(tmp_path):
    settings = Settings(data_dir=tmp_path)
    why = "tier 2's side (/venv/bin/python importing torch in the sandbox) exited with status 127: python: not found"
    record_sandbox(settings, "cpu@host", isolated=True, reason="", allow_unisolated=False, tier2=why)
    assert sandbox_states(settings)["cpu@host"] | {"pid": 0, "checked_at": 0} == {
        "state": "not ready",
        "reason": why,
        "pid": 0,
        "checked_at": 0,
    }
    record_sandbox(settings, "cpu@host", isolated=False, reason="bwrap missing", allow_unisolated=True, tier2=why)
    assert sandbox_states(settings)["cpu@host"]["state"] == "not ready"  # opted out, and still broken
    record_sandbox(settings, "cpu@host", isolated=False, reason="bwrap missing", allow_unisolated=False, tier2=why)
    assert sandbox_states(settings)["cpu@host"]["reason"] == "bwrap missing"  # refusing says why first
    record_sandbox(settings, "cpu@host", isolated=True, reason="", allow_unisolated=False)
    assert sandbox_states(settings)["cpu@host"]["state"] == "isolated"  # fixed: the next probe says so
