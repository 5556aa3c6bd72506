"""Service overhead of ``POST /v1/generate`` over decoding in-process with the same model.

Usage (from the repository root):

    .venv/bin/python bench/generate_overhead.py [BASE_URL] [--spawn] [--broker URL]
        [--model smollm2-135m | --model-dir FOLDER] [--api-key KEY] [--repeats 5] [--max-tokens 32]

Without ``--spawn`` it measures the running server at BASE_URL (default http://127.0.0.1:8000),
which must serve ``--model``. With ``--spawn`` it starts uvicorn and one Celery worker on an
embedded SQLite database in a temporary folder, auth off (broker: embedded SQLite, or ``--broker``, e.g. a
Redis URL) serving the model, and stops them at the end.

Both paths decode the same prompt greedily with the same ``max_tokens``: the service through
``/v1/generate`` (verify none), the bench process through ``cuset_core.generation.sampling.generate``.
Greedy decoding of one prompt gives both the same tokens; the bench checks the counts agree.
Each repeat times one request and one direct call, interleaved so that load drifts hit both.
Prints one JSON line: median seconds of each path and their ratio (target: ratio <= 1.10).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuset_core.generation.sampling import generate  # noqa: E402
from cuset_core.models import load_model  # noqa: E402

PROMPT = "Write a CUDA kernel that adds two float vectors of length n, one thread per element."
TARGET_RATIO = 1.10
MODEL_ID = "bench-model"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(folder: Path, spec: str, broker: str | None) -> tuple[str, list[subprocess.Popen]]:
    """uvicorn and a Celery worker on an embedded database under ``folder``; the base URL."""
    env = dict(
        os.environ,
        CUSET_DATA_DIR=str(folder),
        CUSET_BASE_MODELS=json.dumps({MODEL_ID: spec}),
        CUSET_AUTH="false",
        PYTHONUNBUFFERED="1",
    )
    if broker:
        env |= {"CUSET_BROKER_URL": broker, "CUSET_BROKER_KEY_PREFIX": f"cuset-bench-{os.getpid()}:"}
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from db.migrate import upgrade; from db.settings import get_settings;"
            "upgrade(get_settings().resolved_database_url)",
        ],
        cwd=REPO,
        env=env,
        check=True,
    )
    port = _free_port()
    log = open(folder / "service.log", "w")
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "worker.app",
                "worker",
                "-Q",
                "infer,cpu",
                "-c",
                "1",
                "--pool",
                "prefork",
                "-l",
                "WARNING",
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "api.main:app_factory",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        ),
    ]
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return base, processes
        except httpx.HTTPError:
            time.sleep(0.3)
    raise RuntimeError(f"service did not start: {(folder / 'service.log').read_text()[-3000:]}")


@contextmanager
def service(spec: str, broker: str | None) -> Iterator[str]:
    """``spawn`` in a temporary folder for the ``with`` block; its base URL. On a failure the
    service log goes to stderr; the processes are stopped either way."""
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="cuset-bench-") as folder:
        try:
            base, processes = spawn(Path(folder), spec, broker)
            yield base
        except Exception:
            print((Path(folder) / "service.log").read_text()[-4000:], file=sys.stderr)
            raise
        finally:
            for process in processes:
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:  # a worker finishing a decode; the error above matters
                    process.kill()
                    process.wait(30)


def through_service(base: str, model: str, max_tokens: int, api_key: str | None) -> tuple[float, int]:
    """Seconds for one /v1/generate round trip, and the completion tokens it reports."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    started = time.perf_counter()
    response = httpx.post(
        f"{base}/v1/generate",
        timeout=600,
        headers=headers,
        json={"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "verify": "none"},
    )
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"/v1/generate answered {response.status_code}: {response.text}")
    return seconds, response.json()["usage"]["completion_tokens"]


def direct(model, tokenizer, max_tokens: int) -> tuple[float, int]:
    """Seconds for one in-process ``sampling.generate`` call, and its completion tokens."""
    started = time.perf_counter()
    [[sample]] = generate(model, tokenizer, [[{"role": "user", "content": PROMPT}]], max_new_tokens=max_tokens)
    return time.perf_counter() - started, sample.completion_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("base_url", nargs="?", default="http://127.0.0.1:8000")
    parser.add_argument("--spawn", action="store_true", help="start uvicorn + a worker on embedded SQLite")
    parser.add_argument("--broker", help="with --spawn: a broker URL instead of the embedded SQLite one")
    parser.add_argument("--model", default="smollm2-135m", help="model id the server serves (a spec with --spawn)")
    parser.add_argument("--model-dir", help="a Hugging Face model folder (with --spawn) instead of --model")
    parser.add_argument("--api-key", default=os.environ.get("CUSET_API_KEY"), help="for a server with auth on")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    spec = args.model_dir or args.model

    with ExitStack() as stack:
        if args.spawn:
            base, served = stack.enter_context(service(spec, args.broker)), MODEL_ID
        else:
            base, served = args.base_url.rstrip("/"), args.model
        model, tokenizer = load_model(spec)
        model.eval()
        through_service(base, served, args.max_tokens, args.api_key)  # the worker loads the model
        direct(model, tokenizer, args.max_tokens)  # first-call warmup in this process
        service_s, direct_s = [], []
        for _ in range(args.repeats):
            seconds, service_tokens = through_service(base, served, args.max_tokens, args.api_key)
            service_s.append(seconds)
            seconds, direct_tokens = direct(model, tokenizer, args.max_tokens)
            direct_s.append(seconds)
            if service_tokens != direct_tokens:
                raise SystemExit(f"token counts differ: service {service_tokens}, direct {direct_tokens}")
    service_median, direct_median = statistics.median(service_s), statistics.median(direct_s)
    ratio = service_median / direct_median
    print(
        json.dumps(
            {
                "model": spec,
                "max_tokens": args.max_tokens,
                "completion_tokens": direct_tokens,
                "repeats": args.repeats,
                "broker": (args.broker or "embedded sqlite") if args.spawn else "external server",
                "service_median_s": round(service_median, 4),
                "direct_median_s": round(direct_median, 4),
                "overhead_ratio": round(ratio, 3),
                "target_ratio": TARGET_RATIO,
                "within_target": ratio <= TARGET_RATIO,
            }
        )
    )


if __name__ == "__main__":
    main()
