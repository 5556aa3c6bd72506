"""The service settings: embedded defaults, CUSET_ overrides, and deployment files that parse."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from db.settings import Settings

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """No CUSET_ variable of the caller's shell leaks into these tests."""
    import os

    for name in list(os.environ):
        if name.startswith("CUSET_"):
            monkeypatch.delenv(name)


def test_defaults_embed_sqlite_database_and_broker_under_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CUSET_DATA_DIR", str(tmp_path))
    settings = Settings()
    assert settings.embedded
    assert settings.resolved_database_url == f"sqlite:///{tmp_path / 'cuset.sqlite'}"
    assert settings.resolved_broker_url == f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}"
    assert settings.artifacts == (tmp_path / "artifacts").resolve()
    assert settings.base_models == {"smollm2-135m": "smollm2-135m"}


def test_environment_switches_to_postgres_and_redis(tmp_path, monkeypatch):
    monkeypatch.setenv("CUSET_DATABASE_URL", "postgresql+psycopg://cuset:secret@db:5432/cuset")
    monkeypatch.setenv("CUSET_BROKER_URL", "redis://redis:6379/0")
    monkeypatch.setenv("CUSET_ARTIFACT_ROOT", str(tmp_path / "shared"))
    monkeypatch.setenv("CUSET_MAX_UPLOAD_MB", "64")
    monkeypatch.setenv("CUSET_HEARTBEAT_TIMEOUT_S", "12.5")
    settings = Settings()
    assert not settings.embedded
    assert settings.resolved_database_url == "postgresql+psycopg://cuset:secret@db:5432/cuset"
    assert settings.resolved_broker_url == "redis://redis:6379/0"
    assert settings.artifacts == (tmp_path / "shared").resolve()
    assert settings.max_upload_mb == 64
    assert settings.heartbeat_timeout_s == 12.5


def test_base_models_and_launcher_parse_json(monkeypatch):
    monkeypatch.setenv("CUSET_BASE_MODELS", '{"smollm2-135m": "smollm2-135m", "mine": "/models/coder-1.5b"}')
    monkeypatch.setenv("CUSET_TRAINING_LAUNCHER", '["accelerate", "launch", "--num_processes", "2"]')
    settings = Settings()
    assert settings.base_models == {"smollm2-135m": "smollm2-135m", "mine": "/models/coder-1.5b"}
    assert settings.training_launcher == ["accelerate", "launch", "--num_processes", "2"]


def test_invalid_values_are_rejected(monkeypatch):
    from pydantic import ValidationError

    monkeypatch.setenv("CUSET_MAX_UPLOAD_MB", "0")
    with pytest.raises(ValidationError, match="max_upload_mb"):
        Settings()


def test_worker_command_serves_every_queue_with_beat_in_one_process(tmp_path):
    from api.embedded import worker_command

    command = worker_command(schedule_file=tmp_path / "beat")
    assert command[1:6] == ["-m", "celery", "-A", "worker.app", "worker"]
    assert command[command.index("-Q") + 1] == "train,infer,cpu"
    assert command[command.index("--pool") + 1] == "prefork"
    assert "-B" in command and command[command.index("-s") + 1] == str(tmp_path / "beat")
    assert "-B" not in worker_command(("train",), 1, beat=False)


def _compose_command() -> list[str] | None:
    """``docker compose`` (the plugin) or the standalone ``docker-compose``, whichever works."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


@pytest.mark.skipif(_compose_command() is None, reason="neither `docker compose` nor `docker-compose` is installed")
def test_compose_file_is_valid():
    result = subprocess.run([*_compose_command(), "config", "-q"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_serve_refuses_auth_off_on_a_public_address(tmp_path):
    from api.embedded import serve

    with pytest.raises(ValueError, match="loopback"):
        serve(Settings(data_dir=tmp_path, auth=False), host="0.0.0.0")
    assert not (tmp_path / "cuset.sqlite").exists(), "nothing starts when the address is refused"


def test_printed_urls_hide_passwords():
    from api.embedded import _redact

    assert _redact("postgresql+psycopg://cuset:secret@db:5432/cuset") == "postgresql+psycopg://cuset:***@db:5432/cuset"
    assert _redact("redis://redis:6379/0") == "redis://redis:6379/0"


def test_worker_queues_names_train_infer_and_cpu_and_reads_the_old_gpu_as_train_and_infer():
    import typer

    from api.cli import worker_queues

    assert worker_queues("train") == ("train",)
    assert worker_queues(" infer , cpu ") == ("infer", "cpu")
    assert worker_queues("gpu,cpu") == ("train", "infer", "cpu")
    with pytest.raises(typer.BadParameter, match="'bogus'"):
        worker_queues("cpu,bogus")
    with pytest.raises(typer.BadParameter, match="at least one"):
        worker_queues(" , ")


def test_compose_pins_a_train_and_an_infer_worker_to_each_gpu_and_serves_every_queue():
    import yaml

    from api.cli import worker_queues
    from service.dispatch import QUEUES

    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    served: set[str] = set()
    by_device: dict[tuple[str, ...], set[str]] = {}
    for service in services.values():
        command = service.get("command") or []
        if command[:2] != ["cuset", "worker"]:
            continue
        queues = worker_queues(command[command.index("--queues") + 1])
        served.update(queues)
        devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        if "cpu" not in queues:
            assert len(devices) == 1 and "count" not in devices[0], "a GPU worker reserves its GPU by id"
            assert command[command.index("--concurrency") + 1] == "1", "one process per queue and GPU"
            by_device.setdefault(tuple(devices[0]["device_ids"]), set()).update(queues)
    assert served == set(QUEUES)
    assert by_device and all(queues == {"train", "infer"} for queues in by_device.values())


def test_inference_engines_map_base_models_to_engine_urls(monkeypatch):
    from db.engine_routes import EngineRoute
    from service.engine_routing import base_engine_routes

    monkeypatch.setenv("CUSET_BASE_MODELS", '{"qwen-7b": "Qwen/Qwen2.5-Coder-7B-Instruct", "tiny": "tiny"}')
    monkeypatch.setenv(
        "CUSET_INFERENCE_ENGINES",
        '{"qwen-7b": {"url": "http://vllm:8000/v1/", "model": "Qwen/Qwen2.5-Coder-7B-Instruct",'
        ' "api_key_env": "VLLM_KEY"}}',
    )
    monkeypatch.setenv("VLLM_KEY", "secret")

    routes = base_engine_routes(Settings())

    assert routes == {
        "qwen-7b": EngineRoute(
            url="http://vllm:8000/v1", model="Qwen/Qwen2.5-Coder-7B-Instruct", api_key_env="VLLM_KEY"
        )
    }
    assert routes["qwen-7b"].headers() == {"Authorization": "Bearer secret"}
    assert routes["qwen-7b"].spec() == "openai:http://vllm:8000/v1#Qwen/Qwen2.5-Coder-7B-Instruct"


@pytest.mark.parametrize(
    ("engines", "message"),
    [
        ({"other": {"url": "http://vllm:8000/v1"}}, "'other'] are not base models"),
        ({"smollm2-135m": {"url": "vllm:8000"}}, "the URL must be http"),
        ({"smollm2-135m": {"url": "http://vllm:8000/v1", "key": "x"}}, "Extra inputs are not permitted"),
    ],
)
def test_inference_engines_are_checked_when_the_settings_are_read(monkeypatch, engines, message):
    import json

    monkeypatch.setenv("CUSET_INFERENCE_ENGINES", json.dumps(engines))

    with pytest.raises(ValueError, match=message):
        Settings()


def test_every_worker_runs_the_image_with_the_cuda_toolkit_and_the_api_the_slim_one():
    import yaml

    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    for name, service in services.items():
        if (service.get("command") or [])[:2] == ["cuset", "worker"]:
            # Tier 1 (the cpu queue) needs nvcc and tier 3 (infer) load_inline's toolkit.
            assert "cuda" in service["build"]["args"]["BASE_IMAGE"] and service["image"].endswith("-cuda"), name
    assert services["api"]["build"] == "." and "cuda" not in services["api"]["image"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim" in dockerfile and "ninja-build" in dockerfile


def test_the_env_example_names_only_variables_compose_or_the_settings_read():
    from cuset_core.verify.settings import SandboxSettings
    from db.settings import Settings

    example = (REPO / ".env.example").read_text()
    named = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example, flags=re.MULTILINE))
    compose = set(re.findall(r"\$\{([A-Z][A-Z0-9_]+)", (REPO / "docker-compose.yml").read_text()))
    settings = {f"CUSET_{name.upper()}" for name in Settings.model_fields}
    settings |= {f"CUSET_SANDBOX_{name.upper()}" for name in SandboxSettings.model_fields}
    assert compose <= named  # every variable compose substitutes is explained
    assert named <= compose | settings, named - compose - settings
