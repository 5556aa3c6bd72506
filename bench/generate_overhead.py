"""Service overhead of ``POST /v1/generate`` over decoding in-process with the same model, or
(``--engine``) over calling the inference engine that decodes for the service directly.

Usage (from the repository root):

    .venv/bin/python bench/generate_overhead.py [BASE_URL] [--spawn] [--broker URL]
        [--model smollm2-135m | --model-dir FOLDER] [--api-key KEY] [--repeats 5] [--max-tokens 32]
        [--engine [URL] [--engine-model NAME] [--engine-api-key KEY]]

Without ``--spawn`` it measures the running server at BASE_URL (default http://127.0.0.1:8000),
which must serve ``--model``. With ``--spawn`` it starts uvicorn and one Celery worker on an
embedded SQLite database in a temporary folder, auth off (broker: embedded SQLite, or ``--broker``, e.g. a
Redis URL) serving the model, and stops them at the end.

Both paths decode the same prompt greedily with the same ``max_tokens``: the service through
``/v1/generate`` (verify none), the bench process through ``cuset_core.generation.sampling.generate``.
Greedy decoding of one prompt gives both the same tokens; the bench checks the counts agree.
Each repeat times one request and one direct call, interleaved so that load drifts hit both.
Prints one JSON line: median seconds of each path and their ratio (target: ratio <= 1.10).

With ``--engine`` the reference is the engine instead: ``--spawn --engine`` starts a second
service (this project's ``/v1`` is an OpenAI-compatible engine) serving the model, and the
measured service with ``CUSET_INFERENCE_ENGINES`` pointing at it, so its worker loads nothing;
without ``--spawn``, ``--engine URL`` is the engine (vLLM, SGLang, ...) that the server at
BASE_URL is configured with, serving the model as ``--engine-model``. Each repeat times one
``/v1/generate`` on the service and one ``/v1/chat/completions`` with the same message on the
engine, greedy, with the same ``max_tokens``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from api.embedded import worker_command  # noqa: E402
from api.launch import ApiServer  # noqa: E402
from cuset_core.generation.sampling import generate  # noqa: E402
from cuset_core.models import load_model  # noqa: E402

PROMPT = "Write a CUDA kernel that adds two float vectors of length n, one thread per element."
TARGET_RATIO = 1.10
MODEL_ID = "bench-model"


def spawn(folder: Path, settings: dict, broker: str | None) -> tuple[str, list[subprocess.Popen]]:
    """uvicorn and a Celery worker on an embedded database under ``folder`` with ``settings``
    (``CUSET_`` names without the prefix, values as JSON); the base URL."""
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CUSET_DATA_DIR=str(folder), CUSET_AUTH="false", PYTHONUNBUFFERED="1")
    env |= {f"CUSET_{name}": json.dumps(value) for name, value in settings.items()}
    if broker:
        prefix = f"cuset-bench-{os.getpid()}-{folder.name}:"
        env |= {"CUSET_BROKER_URL": broker, "CUSET_BROKER_KEY_PREFIX": prefix}
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
    log = open(folder / "service.log", "ab")  # appending, as the server's output does
    worker = subprocess.Popen(
        worker_command(
            queues=("infer", "cpu"),
            concurrency=1,
            beat=False,
            hostname=f"bench-{os.getpid()}-{folder.name}@%h",
            log_level="WARNING",
        ),
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = ApiServer(env, folder / "service.log")
    server.start(timeout_s=120)
    return server.base, [worker, server.process]


def _timed_post(url: str, body: dict, api_key: str | None) -> tuple[float, int]:
    """Seconds for one POST of ``body`` to ``url``, and the completion tokens its usage reports."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    started = time.perf_counter()
    response = httpx.post(url, timeout=600, headers=headers, json=body)
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"{url} answered {response.status_code}: {response.text}")
    return seconds, response.json()["usage"]["completion_tokens"]


def through_service(base: str, model: str, max_tokens: int, api_key: str | None) -> tuple[float, int]:
    """Seconds for one /v1/generate round trip, and the completion tokens it reports."""
    body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "verify": "none"}
    return _timed_post(f"{base}/v1/generate", body, api_key)


def at_engine(engine: str, model: str, max_tokens: int, api_key: str | None) -> tuple[float, int]:
    """Seconds for one chat completion straight from the engine (the message ``/v1/generate``
    sends for a prompt), and the completion tokens it reports."""
    messages = [{"role": "user", "content": PROMPT}]
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    return _timed_post(f"{engine}/chat/completions", body, api_key)


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
    parser.add_argument(
        "--engine", nargs="?", const="spawn", help="compare with the engine the service decodes at (URL, or spawned)"
    )
    parser.add_argument("--engine-model", help="the model's name at the engine (default --model)")
    parser.add_argument("--engine-api-key", default=os.environ.get("ENGINE_API_KEY"))
    args = parser.parse_args()
    spec = args.model_dir or args.model
    if args.engine and (args.engine == "spawn") != args.spawn:
        parser.error("--engine without a URL spawns the engine (needs --spawn); with --spawn give no URL")

    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="cuset-bench-") as folder:
        try:
            if args.spawn:
                models = {"BASE_MODELS": {MODEL_ID: spec}}
                if args.engine:
                    engine_base, processes = spawn(Path(folder) / "engine", models, args.broker)
                    args.engine, args.engine_model = f"{engine_base}/v1", MODEL_ID
                    models["INFERENCE_ENGINES"] = {MODEL_ID: {"url": args.engine}}
                base, front = spawn(Path(folder) / "service", models, args.broker)
                processes += front
                served = MODEL_ID
            else:
                base, served = args.base_url.rstrip("/"), args.model
            if args.engine:
                engine_model = args.engine_model or served

                def reference() -> tuple[float, int]:
                    return at_engine(args.engine, engine_model, args.max_tokens, args.engine_api_key)
            else:
                model, tokenizer = load_model(spec)
                model.eval()

                def reference() -> tuple[float, int]:
                    return direct(model, tokenizer, args.max_tokens)

            through_service(base, served, args.max_tokens, args.api_key)  # the worker (or engine) loads the model
            reference()  # first-call warmup
            service_s, direct_s = [], []
            for _ in range(args.repeats):
                seconds, service_tokens = through_service(base, served, args.max_tokens, args.api_key)
                service_s.append(seconds)
                seconds, direct_tokens = reference()
                direct_s.append(seconds)
                if service_tokens != direct_tokens:
                    raise SystemExit(f"token counts differ: service {service_tokens}, direct {direct_tokens}")
        except Exception:
            for log in Path(folder).glob("*/service.log"):
                print(f"{log}:\n{log.read_text()[-4000:]}", file=sys.stderr)
            raise
        finally:
            for process in processes:
                process.terminate()
                process.wait(30)
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
                "reference": f"engine {args.engine}" if args.engine else "in-process sampling.generate",
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
