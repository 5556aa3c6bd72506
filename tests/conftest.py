"""Shared fixtures: the SmolLM2 tokenizer, tiny config-built models, and skip rules."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

# The service fixtures: the real one (Postgres, Redis, worker, server) for integration and browser
# tests, the embedded one (SQLite, no worker) for fast tests.
pytest_plugins = ["tests.real_service", "tests.sqlite_service"]

# Under pytest-xdist each worker is a process, and torch gives each one OpenMP thread per core:
# with two workers on two cores, OpenMP's spinning threads wait on each other. On the training
# and model tests (-n 2) that cost 181 CPU-s against 105 with one thread per worker. Each worker,
# and every process it starts (training subprocesses, Celery workers, servers), gets its share.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
if _WORKERS and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // _WORKERS))

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("CUSET_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def torch_cuda_left_as_found() -> Iterator[None]:
    """Fail a test that leaves ``torch.cuda.is_available`` replaced: tier 2's harness answers it
    for the candidate's sandboxed process (``map_cuda_to_cpu``), and run in a test's process it
    made every later test there take the CPU for a GPU (model placement then fails far away)."""
    import torch

    found = torch.cuda.is_available
    yield
    if torch.cuda.is_available is not found:
        torch.cuda.is_available = found
        pytest.fail("this test left torch.cuda.is_available replaced (tier 2's map_cuda_to_cpu ran in this process?)")


@pytest.fixture
def reference_side_in_this_process(monkeypatch) -> None:
    """For a test that runs tier 2's reference side in its own process: what the side does to torch
    for its sandboxed process (CUDA answers, one thread) must not outlive the test."""
    import torch

    from cuset_core.verify.cpu import harness

    monkeypatch.setattr(harness, "map_cuda_to_cpu", lambda: None)
    monkeypatch.setattr(torch, "set_num_threads", lambda threads: None)


def pytest_collection_modifyitems(config, items):
    # Browser tests last: Playwright's sync API keeps an event loop running in the main thread
    # until the session ends, and tests that call asyncio.run() cannot run after it starts.
    items.sort(key=lambda item: "/browser/" in str(item.fspath))
    has_nvcc = shutil.which("nvcc") is not None
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    for item in items:
        if "nvcc" in item.keywords and not has_nvcc:
            item.add_marker(pytest.mark.skip(reason="nvcc is not on PATH"))
        if "gpu" in item.keywords and not has_gpu:
            item.add_marker(pytest.mark.skip(reason="no CUDA GPU on this machine"))
        if "shared_data" in item.keywords and not SHARED_DATA.is_dir():
            item.add_marker(pytest.mark.skip(reason=f"shared data not found at {SHARED_DATA}"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Folder of the read-only shared data sets (tests using it are marked ``shared_data``)."""
    return SHARED_DATA


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2's fast tokenizer, read from the bundled GGUF file."""
    from cuset_core.models import BUNDLED_MODEL, load_tokenizer

    return load_tokenizer(BUNDLED_MODEL)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    """A folder holding a tiny random SmolLM2-architecture model and the SmolLM2 tokenizer."""
    from cuset_core.models import tiny_model

    folder = tmp_path_factory.mktemp("tiny-model")
    tiny_model(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def hf_home(tmp_path_factory, tiny_model_dir) -> Path:
    """An ``HF_HOME`` whose hub cache holds the tiny model as the repo ``cuset-test/tiny-coder``, laid out
    as huggingface_hub writes it: content-addressed blobs, a snapshot of relative symlinks
    named by the commit, and ``refs/main`` naming that commit."""
    import hashlib

    home = tmp_path_factory.mktemp("hf-home")
    repo = home / "hub" / "models--cuset-test--tiny-coder"
    commit = hashlib.sha1(b"cuset-test/tiny-coder").hexdigest()
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for file in sorted(tiny_model_dir.iterdir()):
        blob = hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copyfile(file, repo / "blobs" / blob)
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", blob))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return home
