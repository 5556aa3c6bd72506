"""The CuSeT demo over HTTP, end to end, against the embedded service.

Starts ``cuset serve`` on a fresh data dir (or uses ``--url``), then, as any client would:
uploads the elementwise family of the demo dataset without the problem it will ask for
(``POST /v1/files``), creates a short CuSeT LoRA job on the bundled SmolLM2-135M
(``POST /v1/fine_tuning/jobs``) and follows it with a progress bar until it succeeds. Then it asks
for a kernel for that held-out problem, verified up to the CPU tier (``POST /v1/generate``): from
the adapter the project tuned and ships (``cuset-ew-135m``) when this installation has it, else
from the job's model; either way best-of-n samples, verified as they finish, stopping at the
first that passes (the adapter's greedy answers loop: its card says why). It
prints the kernel with what every tier concluded (or says plainly that no candidate passed), and
stops the service (``--keep-serving`` leaves it up for the dashboard until Ctrl-C).

A few tuning steps show the service at work; they do not teach a 135M model to write kernels,
which is why the kernel comes from the shipped adapter (docs/results.md: how it was tuned).

    .venv/bin/python scripts/demo_service.py [--steps 2] [--samples 8] [--keep-serving]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.syntax import Syntax

from api.launch import LaunchError, wait_until_up
from cuset_core.demo import CATEGORIES, demo_problems, write_demo_dataset

REPO = Path(__file__).resolve().parent.parent
FINISHED = ("succeeded", "failed", "cancelled")
SHIPPED_ADAPTER = "cuset-ew-135m"
# An elementwise problem the shipped adapter never saw in training (its operation, sigmoid, it did):
# of the held-out problems, the one it writes best (its card: 3 of 4 samples passed; 3 of 11
# over four demo runs on 2026-12-04, hence up to 8 samples).
PROBLEM = "06_sigmoid"
console = Console()


class DemoError(Exception):
    """A step of the demo failed; the message says which and why."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="use a running service at this base URL instead of starting one")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("CUSET_API_KEY") or os.environ.get("OPENAI_API_KEY"),
        help="key for --url (default: $CUSET_API_KEY or $OPENAI_API_KEY)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "runs" / "demo-service",
        help="folder for the service's data dir (recreated) and the demo's outputs",
    )
    parser.add_argument("--port", type=int, default=8000, help="port for the started service (a free one if taken)")
    parser.add_argument("--model", default="smollm2-135m", help="base model id served by the service")
    parser.add_argument("--method", default="cuset", help="training objective (cuset, sft, ...)")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps of the tuning job")
    parser.add_argument(
        "--family",
        default="elementwise",
        choices=[*CATEGORIES, "all"],
        help="demo problem family uploaded for tuning (short records: a step takes seconds, not a minute)",
    )
    parser.add_argument(
        "--adapter",
        default=SHIPPED_ADAPTER,
        help="shipped adapter that writes the kernel when the service lists it; 'none': the job's model",
    )
    parser.add_argument("--samples", type=int, default=8, help="kernels drawn and verified until one passes")
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of those kernels")
    parser.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling of those kernels (as evaluated)")
    parser.add_argument(
        "--problem", default=PROBLEM, help="demo problem to write a kernel for (left out of the uploaded data)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=640, help="generation budget, tokens (the demo's kernels take 450-900)"
    )
    parser.add_argument(
        "--verify", default="cpu", choices=["static", "compile", "cpu", "gpu"], help="highest verification tier"
    )
    parser.add_argument("--keep-serving", action="store_true", help="leave the service up afterwards (Ctrl-C stops it)")
    return parser.parse_args(argv)


# ---------------------------------------------------------------- the service we start


def free_port(preferred: int) -> int:
    """``preferred`` when nothing listens on it, else any free loopback port."""
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise DemoError("no free port")


def service_env(data_dir: Path) -> dict[str, str]:
    """The embedded defaults (SQLite and its broker in ``data_dir``), whatever the shell sets."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("CUSET_")}
    env["CUSET_DATA_DIR"] = str(data_dir)
    return env


def start_service(data_dir: Path, port: int) -> subprocess.Popen:
    """``cuset serve`` on a fresh ``data_dir`` as a child; its output goes to ``data_dir/serve.log``."""
    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)
    log = open(data_dir / "serve.log", "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "cuset_core.cli", "serve", "--port", str(port)],
        cwd=REPO,
        env=service_env(data_dir),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def create_key(data_dir: Path) -> str:
    """A new API key for the started service (``cuset keys create``, as an operator would)."""
    result = subprocess.run(
        [sys.executable, "-m", "cuset_core.cli", "keys", "create", "--name", "demo"],
        cwd=REPO,
        env=service_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise DemoError(f"cuset keys create failed: {result.stderr[-2000:]}")
    return result.stdout.strip()


def wait_ready(base: str, service: subprocess.Popen | None, log: Path | None, timeout_s: float = 180) -> None:
    """Poll ``/readyz`` until the database and broker answer."""
    with console.status("starting the service (migrations, worker, API)..."):
        try:
            wait_until_up(base, service, path="/readyz", timeout_s=timeout_s, log_path=log)
        except LaunchError as exc:
            raise DemoError(f"cuset serve: {exc}") from None


def stop_service(service: subprocess.Popen) -> None:
    """SIGTERM: ``cuset serve`` stops the API, then its worker."""
    if service.poll() is None:
        service.send_signal(signal.SIGTERM)
        try:
            service.wait(60)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait(10)


# ---------------------------------------------------------------- the demo, over HTTP


def check(response: httpx.Response, what: str) -> dict:
    """The JSON body of a 2xx ``response``; DemoError with the API's error message otherwise."""
    if response.is_success:
        return response.json()
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text[:500]
    raise DemoError(f"{what}: HTTP {response.status_code}: {message}")


def upload_dataset(client: httpx.Client, out: Path, args: argparse.Namespace) -> dict:
    path = out / "demo_train.jsonl"
    families = None if args.family == "all" else [args.family]
    written = write_demo_dataset(path, held_out=[args.problem], categories=families)
    with open(path, "rb") as handle:
        file = check(
            client.post(
                "/v1/files", data={"purpose": "fine-tune"}, files={"file": (path.name, handle, "application/jsonl")}
            ),
            "upload",
        )
    console.print(
        f"uploaded {written} demo records ({args.family} family, {args.problem} held out) as [bold]{file['id']}[/]"
    )
    return file


def create_job(client: httpx.Client, file_id: str, args: argparse.Namespace) -> dict:
    body = {
        "model": args.model,
        "training_file": file_id,
        "method": {"type": args.method},
        "suffix": "demo",
        "hyperparameters": {
            "max_steps": args.steps,
            "batch_size": 2,
            "learning_rate": 3e-4,
            "warmup_steps": min(2, args.steps - 1),
            # Every demo record fits (the longest, with its compact prompt, is ~1,650 tokens).
            "max_seq_len": 2048,
            # gradient_checkpointing is left to the default: on when the service trains on a CPU, where two
            # sequences of 2,048 tokens without it hold many GB of activations (bench/tune_memory.py).
            "save_steps": args.steps,
        },
    }
    job = check(client.post("/v1/fine_tuning/jobs", json=body), "create the job")
    console.print(f"created job [bold]{job['id']}[/] ({args.method}, LoRA, {args.steps} steps on {args.model})")
    return job


def follow_job(client: httpx.Client, job_id: str) -> dict:
    """Poll the job until it finishes, with a bar of optimizer steps and the server's ETA."""
    seen: set[str] = set()
    last: tuple = ()
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description:<18}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("steps"),
        TimeElapsedColumn(),
        TextColumn("ETA {task.fields[eta]}"),
    )
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("validating_files", total=None, eta="-")
        while True:
            job = check(client.get(f"/v1/fine_tuning/jobs/{job_id}"), "poll the job")
            for event in _new_events(client, job_id, seen):
                progress.console.print(
                    f"  [dim]{time.strftime('%H:%M:%S', time.localtime(event['created_at']))}[/] {event['message']}"
                )
            state = job["progress"]
            eta = state.get("eta_s")
            if not console.is_terminal and (job["status"], state.get("step")) != last:
                # No live bar in a log file: one line per change instead.
                last = (job["status"], state.get("step"))
                progress.console.print(f"  {job['status']}" + _steps_text(state))
            progress.update(
                bar,
                description=job["status"],
                completed=state.get("step") or 0,
                total=state.get("total_steps"),
                eta=f"{eta:.0f} s" if eta is not None else "-",
            )
            if job["status"] in FINISHED:
                return job
            time.sleep(1.0)


def _steps_text(state: dict) -> str:
    """ ", step 3/8, ETA 40 s" once the job knows its steps; nothing while it validates or queues."""
    if state.get("total_steps") is None:
        return ""
    eta = state.get("eta_s")
    return f": step {state.get('step') or 0}/{state['total_steps']}" + (f", ETA {eta:.0f} s" if eta is not None else "")


def _new_events(client: httpx.Client, job_id: str, seen: set[str]) -> list[dict]:
    """Events not printed yet, oldest first (the API lists newest first)."""
    response = client.get(f"/v1/fine_tuning/jobs/{job_id}/events", params={"limit": 50})
    if not response.is_success:
        return []
    fresh = [event for event in response.json()["data"] if event["id"] not in seen and event.get("type") != "metrics"]
    seen.update(event["id"] for event in fresh)
    return sorted(fresh, key=lambda event: event["created_at"])


def generation_plan(listed: list[str], tuned_model: str, args: argparse.Namespace) -> tuple[str, dict, str]:
    """(model, decoding fields of /v1/generate, what to tell the user): the shipped adapter when
    the service lists it, else the tuned model; either draws up to ``--samples`` kernels at
    ``--temperature`` and stops at the first that passes verification."""
    decoding = {
        "best_of": args.samples,
        "stop_at_first_pass": True,
        "temperature": args.temperature,
        "top_p": args.top_p,
    }
    until = f"up to {args.samples} samples until one passes"
    if args.adapter != "none" and args.adapter in listed:
        return args.adapter, decoding, f"the shipped adapter {args.adapter}, {until}"
    missing = (
        ""
        if args.adapter == "none"
        else f"{args.adapter} is not in this installation (no weights under cuset_core/adapters/); "
    )
    return tuned_model, decoding, f"{missing}the {args.steps}-step model {tuned_model}, {until}"


class GenerationWatch:
    """What a streamed ``/v1/generate`` has shown so far: samples drawn and verified, and the
    response the call without ``stream`` returns (``result``), built from its events."""

    def __init__(self, best_of: int, started: float, quiet_s: float = 30.0):
        # quiet_s: a line at least this often while a sample decodes (where no live bar shows time)
        self.best_of, self.started, self.quiet_s = best_of, started, quiet_s
        self.samples: dict[int, dict] = {}
        self.done: dict | None = None
        self.last_said = started

    @property
    def drawn(self) -> int:
        return sum(sample["finish_reason"] is not None for sample in self.samples.values())

    @property
    def verified(self) -> int:
        return sum(sample["verification"] is not None for sample in self.samples.values())

    def counts(self, now: float) -> str:
        """ "2 of 8 samples drawn, 1 verified, 95 s" """
        return f"{self.drawn} of {self.best_of} samples drawn, {self.verified} verified, {now - self.started:.0f} s"

    def apply(self, event: str, data: dict, now: float) -> str | None:
        """Take one event; what to print where no live bar shows it, or None."""
        if event == "error":
            error = data.get("error") or {}
            raise DemoError(f"generate: {error.get('message')} ({error.get('code')})")
        if event == "generation.done":
            self.done = data
            return None
        sample = self.samples.setdefault(
            data["index"], {"text": "", "code": None, "finish_reason": None, "verification": None, "cancelled": False}
        )
        said = None
        if event == "sample.done":
            sample.update(data)
            said = f"sample {data['index']} drawn ({data['finish_reason']})"
        elif event == "sample.verification":
            sample["verification"] = verification = data["verification"] or {}
            said = f"sample {data['index']}: {verification.get('verdict')} (tier {verification.get('tier')})"
        elif event == "sample.cancelled":
            sample["cancelled"] = True
        elif now - self.last_said >= self.quiet_s:
            said = f"decoding sample {data['index']}"
        if said is None:
            return None
        self.last_said = now
        return f"{said}; {self.counts(now)}"

    def result(self) -> dict:
        """The non-streamed response's shape; attempts never started count as cancelled."""
        if self.done is None:
            raise DemoError("generate: the stream ended before the generation did")
        unstarted = {"text": "", "code": None, "finish_reason": None, "verification": None, "cancelled": True}
        count = max(self.best_of, max(self.samples, default=-1) + 1)
        samples = [self.samples.get(index, unstarted) for index in range(count)]
        return {"samples": samples, "chosen": self.done.get("chosen"), "timings": self.done.get("timings")}


def sse_events(lines) -> Iterator[tuple[str, dict]]:
    """(event, data) of a server-sent event stream's lines, until ``data: [DONE]``."""
    event = "message"
    for line in lines:
        if line.startswith("event:"):
            event = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                return
            yield event, json.loads(data)
            event = "message"


def generate_kernel(client: httpx.Client, model: str, decoding: dict, args: argparse.Namespace) -> dict:
    """Draw and verify through the streamed ``/v1/generate``, showing samples drawn and verified
    and the time taken: a live bar in a terminal, a line per change (and every 30 s) otherwise."""
    problem = {p.id: p for p in demo_problems()}[args.problem]
    body = {
        "model": model,
        "problem": problem.problem_code,
        "max_tokens": args.max_tokens,
        "verify": args.verify,
        "stream": True,
        **decoding,
    }
    terminal = console.is_terminal
    watch = GenerationWatch(decoding.get("best_of", 1), time.monotonic(), quiet_s=math.inf if terminal else 30.0)
    columns = (
        SpinnerColumn(),
        TextColumn("samples"),
        BarColumn(),
        TextColumn("{task.completed:.0f} of {task.total:.0f} drawn, {task.fields[verified]} verified"),
        TimeElapsedColumn(),
    )
    with client.stream("POST", "/v1/generate", json=body, timeout=1800) as response:
        if response.status_code != 200:
            response.read()
            check(response, "generate")
        with Progress(*columns, console=console, disable=not terminal) as progress:
            bar = progress.add_task("generate", total=watch.best_of, verified=0)
            for event, data in sse_events(response.iter_lines()):
                said = watch.apply(event, data, time.monotonic())
                if said is not None:
                    progress.console.print(f"  {said}")
                progress.update(bar, completed=watch.drawn, verified=watch.verified)
    return watch.result()


def best_sample(result: dict) -> tuple[int, dict]:
    """(index, sample): the chosen one (the first that passed), else the one that got furthest
    through the tiers, the earliest of equals."""
    samples = result["samples"]
    if result.get("chosen") is not None:
        return result["chosen"], samples[result["chosen"]]

    def progress(item: tuple[int, dict]) -> tuple[bool, int, int]:
        verification = item[1].get("verification") or {}
        return (verification.get("verdict") == "pass", len(verification.get("tiers_run") or []), -item[0])

    return max(enumerate(samples), key=progress)


def show_generation(result: dict, problem: str, out: Path) -> None:
    samples = result["samples"]
    drawn = [(index, sample) for index, sample in enumerate(samples) if not sample.get("cancelled")]
    for index, sample in drawn:
        (out / f"generated_{problem}_{index}.md").write_text(sample["text"])
        verification = sample.get("verification") or {}
        console.print(
            f"  sample {index}: {verification.get('verdict', 'not verified')} "
            f"(tier {verification.get('tier', '-')}) {verification.get('reason', '')[:100]}"
        )
    if len(drawn) < len(samples):
        console.print(f"  {len(samples) - len(drawn)} more not drawn: a kernel had passed")
    index, sample = best_sample(result)
    verification = sample.get("verification") or {}
    verdict = verification.get("verdict", "not verified")
    console.print(
        Panel(
            Syntax(sample["code"] or sample["text"], "python", word_wrap=True),
            title=f"sample {index} of {len(drawn)} for {problem} ({sample['finish_reason']})",
        )
    )
    tiers = verification.get("tier_verdicts") or {}
    console.print(
        "every tier run: " + (", ".join(f"{tier} {tier_verdict}" for tier, tier_verdict in tiers.items()) or "none")
    )
    if verdict == "pass":
        console.print(f"[green]verdict: pass[/] (decided by tier {verification.get('tier')}): a verified kernel")
    else:
        console.print(
            f"[yellow]no candidate passed[/]: the best of {len(drawn)} stopped at "
            f"{verdict} (tier {verification.get('tier', '-')})"
        )
    if verification.get("reason"):
        console.print(f"reason: {verification['reason']}")
    timings = result.get("timings") or {}
    console.print(
        "timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items() if k.endswith("_s") and v is not None)
    )


def run_demo(base: str, api_key: str | None, args: argparse.Namespace) -> None:
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        console.rule("1. Upload the demo dataset")
        file = upload_dataset(client, out, args)
        console.rule("2. Tune")
        job = create_job(client, file["id"], args)
        started = time.monotonic()
        job = follow_job(client, job["id"])
        if job["status"] != "succeeded":
            error = job.get("error") or {}
            raise DemoError(f"job {job['id']} {job['status']}: {error.get('message', 'no error recorded')}")
        console.print(
            f"[green]succeeded[/] in {time.monotonic() - started:.0f} s: model [bold]{job['fine_tuned_model']}[/]"
        )
        console.rule(f"3. Write a kernel for held-out {args.problem}")
        listed = [model["id"] for model in check(client.get("/v1/models"), "list the models")["data"]]
        model, decoding, told = generation_plan(listed, job["fine_tuned_model"], args)
        console.print(f"with {told}")
        started = time.monotonic()
        show_generation(generate_kernel(client, model, decoding, args), args.problem, out)
        console.print(f"generation and verification took {time.monotonic() - started:.0f} s")
        console.rule("Done")
        console.print(f"dashboard: {base}/  (this job: {base}/jobs/{job['id']})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out = args.out.resolve()
    if args.problem not in {problem.id for problem in demo_problems()}:
        console.print(f"[red]no demo problem {args.problem!r}[/] (cuset_core/demo/problems/)")
        return 2
    started = time.monotonic()
    service, log = None, None
    base, api_key = (args.url or "").rstrip("/"), args.api_key
    try:
        if not base:
            port = free_port(args.port)
            data_dir = args.out / "data"
            log = data_dir / "serve.log"
            service = start_service(data_dir, port)
            base = f"http://127.0.0.1:{port}"
        wait_ready(base, service, log)
        if service is not None:
            api_key = create_key(data_dir)
        console.print(f"service ready at {base} (API docs: {base}/docs)")
        run_demo(base, api_key, args)
        console.print(f"the demo took {time.monotonic() - started:.0f} s")
        if service is not None and args.keep_serving:
            console.print(f"still serving at {base}/ (API key: {api_key}); Ctrl-C stops it")
            service.wait()
        return 0
    except DemoError as exc:
        console.print(f"[red]demo failed:[/] {exc}")
        if log is not None:
            console.print(f"service log: {log}; worker log: {log.parent / 'logs' / 'worker.log'}")
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if service is not None:
            with console.status("stopping the service..."):
                stop_service(service)


if __name__ == "__main__":
    sys.exit(main())
