"""The worker's Celery app registers every routed task through ``include``, no task module
imports the app (the import circle of a registry imported at the bottom of the app is gone),
and what the sandbox hides is passed with each verification, not through the environment."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cuset_core.verify.cache import cache_key
from cuset_core.verify.result import Tier
from cuset_core.verify.settings import VerifySettings
from db.settings import Settings
from service.dispatch import ROUTES

TASKS = Path(__file__).resolve().parents[2] / "worker" / "tasks"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_every_routed_task_is_registered_once_the_worker_imports_its_modules():
    from worker.app import app

    app.loader.import_default_modules()

    assert set(ROUTES) <= set(app.tasks)


def test_no_task_module_imports_the_app():
    for path in TASKS.glob("*.py"):
        assert "worker.app" not in _imports(path), path.name


def test_the_service_hides_its_files_in_each_verification_without_changing_the_cache_key(tmp_path):
    from worker.tasks.verify import service_verify_settings

    settings = Settings(data_dir=tmp_path / "data", artifact_root=tmp_path / "artifacts")
    plain = VerifySettings(tier=Tier.CPU)

    hiding = service_verify_settings(settings, plain)

    assert set(hiding.limits.hidden) >= {str((tmp_path / "data").resolve()), str((tmp_path / "artifacts").resolve())}
    assert str((tmp_path / "data" / "cuset.sqlite").resolve()) in hiding.limits.hidden
    assert cache_key("p", "a", Tier.CPU, hiding) == cache_key("p", "a", Tier.CPU, plain)


def test_each_pool_process_takes_its_share_of_the_cores():
    from worker.app import torch_threads

    assert torch_threads(2, 2) == 1  # the demo's machine: decoding and verifying side by side
    assert torch_threads(16, 2) == 8
    assert torch_threads(1, 4) == 1


def test_a_forked_pool_process_runs_torch_on_its_share_with_a_runtime_of_its_own(monkeypatch):
    import os
    from types import SimpleNamespace

    import torch

    from worker import app as worker_app
    from worker.runtime import process_runtime, stop_runtime

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        worker_app._start_worker(sender=SimpleNamespace(concurrency=len(os.sched_getaffinity(0)) * 2))
        in_the_main_process = process_runtime()
        worker_app._start_pool_process()
        assert torch.get_num_threads() == 1
        in_the_child = process_runtime()
        # The worker's settings, and a model cache of the child's own, not one copied from its parent.
        assert in_the_main_process is not None and in_the_child is not None
        assert in_the_child.settings is worker_app.settings and in_the_child.models is not in_the_main_process.models
    finally:
        torch.set_num_threads(before)
        worker_app._start_worker(sender=None)
        stop_runtime()


def test_each_worker_probes_the_sandbox_again_on_its_timer_and_records_it(tmp_path, monkeypatch):
    import types

    from cuset_core.verify.readiness import Readiness
    from cuset_core.verify.sandbox import Isolation
    from db.settings import Settings
    from db.worker_status import sandbox_states
    from worker import app as worker_app

    assert worker_app.SandboxProbe in worker_app.app.steps["worker"]
    settings = Settings(data_dir=tmp_path)
    monkeypatch.setattr(worker_app, "settings", settings)
    monkeypatch.setattr(worker_app, "isolation", lambda: Isolation(False, "bubblewrap (bwrap) is not installed"))
    monkeypatch.setattr(worker_app, "tier2_readiness", lambda: Readiness(True))
    worker = types.SimpleNamespace(hostname="cpu@probe-test")
    worker_app.SandboxProbe.probe(None, worker).join(30)  # in a thread: never the timer's own
    assert sandbox_states(settings)["cpu@probe-test"]["state"] == "refusing"
    monkeypatch.setattr(worker_app, "isolation", lambda: Isolation(True))  # bubblewrap installed since
    worker_app.SandboxProbe.probe(None, worker).join(30)
    assert sandbox_states(settings)["cpu@probe-test"]["state"] == "isolated"


def test_the_workers_probe_records_tier_2_not_ready_with_the_reason_and_ready_once_fixed(tmp_path, monkeypatch):
    import worker.app as worker_app
    from cuset_core.verify.readiness import Readiness
    from cuset_core.verify.sandbox import Isolation
    from db.worker_status import sandbox_states

    settings = Settings(data_dir=tmp_path / "data", artifact_root=tmp_path / "artifacts")
    monkeypatch.setattr(worker_app, "settings", settings)
    monkeypatch.setattr(worker_app, "isolation", lambda: Isolation(True))
    why = "tier 2's side (/venv/bin/python importing torch in the sandbox) exited with status 127: python: not found"
    monkeypatch.setattr(worker_app, "tier2_readiness", lambda: Readiness(False, why))
    worker_app.probe_and_record("cpu@probe")
    assert sandbox_states(settings)["cpu@probe"]["state"] == "not ready"
    assert sandbox_states(settings)["cpu@probe"]["reason"] == why
    monkeypatch.setattr(worker_app, "tier2_readiness", lambda: Readiness(True))
    worker_app.probe_and_record("cpu@probe")
    assert sandbox_states(settings)["cpu@probe"] | {"pid": 0, "checked_at": 0} == {
        "state": "isolated", "reason": "", "pid": 0, "checked_at": 0
    }  # fmt: skip


def test_a_worker_whose_sandbox_refuses_does_not_run_tier_2s_probe(tmp_path, monkeypatch):
    import worker.app as worker_app
    from cuset_core.verify.sandbox import Isolation
    from db.worker_status import sandbox_states

    settings = Settings(data_dir=tmp_path / "data", artifact_root=tmp_path / "artifacts")
    monkeypatch.setattr(worker_app, "settings", settings)
    monkeypatch.setattr(worker_app, "isolation", lambda: Isolation(False, "bubblewrap (bwrap) is not installed"))
    monkeypatch.delenv("CUSET_SANDBOX_ALLOW_UNISOLATED", raising=False)
    monkeypatch.setattr(worker_app, "tier2_readiness", lambda: pytest.fail("probed tier 2 in a refusing sandbox"))
    worker_app.probe_and_record("cpu@refusing")
    assert sandbox_states(settings)["cpu@refusing"]["state"] == "refusing"
