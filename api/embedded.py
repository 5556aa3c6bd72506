"""The whole service as one foreground process: migrations, two Celery worker children and the
API under uvicorn. One worker serves ``train`` and ``infer`` (``--concurrency`` processes); the
other serves ``cpu`` alone (``--cpu-concurrency``, one process by default) and schedules the
reaper (beat), so file validation, tiers 0-2 and bookkeeping never wait behind a generation or a
training run, and no one request can hold every worker process (:func:`embedded_workers`).

With no configuration everything lives in ``settings.data_dir``: the SQLite database, the
SQLite-backed Celery broker (kombu's SQLAlchemy transport) and the artifacts. Setting
``CUSET_DATABASE_URL`` / ``CUSET_BROKER_URL`` points the same command at Postgres / Redis.

Stopping: the first SIGINT (Ctrl-C) or SIGTERM sets the shutdown flag (api/shutdown.py), so
every request waiting on a worker ends at once with a 503 and its generation is stopped, and
starts stopping the workers right away, beside uvicorn's own shutdown: each worker gets SIGTERM
(a warm shutdown; a training run saves a checkpoint and its job goes back to ``queued``),
``stop_timeout_s`` to finish, and SIGKILL after that. Uvicorn waits ``API_GRACE_S`` at most for
open connections. So the whole stop takes ``stop_timeout_s`` (30 s by default) and a few seconds
more at most; a second signal kills the workers at once and ends uvicorn's wait (no traceback).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from db.keys import create_key, has_keys
from db.migrate import upgrade
from db.models import DEFAULT_OWNER
from db.session import session_scope
from db.settings import Settings
from service.dispatch import CPU_QUEUE, INFER_QUEUE, QUEUES, TRAIN_QUEUE, prepare_broker

DEFAULT_QUEUES = QUEUES
LOOPBACK = ("127.0.0.1", "::1", "localhost")
API_GRACE_S = 5  # uvicorn's wait for open connections (timeout_graceful_shutdown) on a stop
STOP_TIMEOUT_S = 22.0  # the workers' warm shutdown, from the first signal, before SIGKILL
TRAINING_KILL_MARGIN_S = 10.0  # a training run still going this long before the deadline is killed


class StopRequested(Exception):
    """Raised by our SIGINT/SIGTERM handler so that every exit path stops the worker."""


@dataclass(frozen=True)
class EmbeddedWorker:
    """One worker child of ``cuset serve``: its node name, queues, pool size, whether it runs
    beat, and its log file (under the data dir's ``logs``)."""

    hostname: str
    queues: tuple[str, ...]
    concurrency: int
    beat: bool
    log_name: str


def embedded_workers(concurrency: int = 2, cpu_concurrency: int = 1) -> list[EmbeddedWorker]:
    """The worker children of ``cuset serve``: ``concurrency`` processes for ``train`` and
    ``infer`` (a tuning run or a generation holds one), and ``cpu_concurrency`` processes of their
    own for ``cpu``, which run beat too. Celery cannot reserve a process of a worker for one of
    its queues, so the slot kept for ``cpu`` is a worker of its own: a validation never waits
    behind a generation, and every queue has a process no single request can take."""
    if concurrency < 1 or cpu_concurrency < 1:
        raise ValueError(f"each worker needs a process; got {concurrency} and {cpu_concurrency}")
    return [
        EmbeddedWorker("cuset@%h", (TRAIN_QUEUE, INFER_QUEUE), concurrency, beat=False, log_name="worker.log"),
        EmbeddedWorker("cuset-cpu@%h", (CPU_QUEUE,), cpu_concurrency, beat=True, log_name="worker-cpu.log"),
    ]


def worker_command(
    queues: tuple[str, ...] = DEFAULT_QUEUES,
    concurrency: int = 2,
    beat: bool = True,
    schedule_file: Path | None = None,
    hostname: str = "cuset@%h",
    log_level: str = "INFO",
) -> list[str]:
    """The ``celery worker`` argv that serves ``queues``.

    The pool is prefork: a long tuning task occupies one child while another child keeps
    serving generation and verification, which a ``solo`` pool (one task at a time) cannot.
    """
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "worker.app",
        "worker",
        "-Q",
        ",".join(queues),
        "-c",
        str(concurrency),
        "--pool",
        "prefork",
        "-n",
        hostname,
        "-l",
        log_level,
    ]
    if beat:
        # Beat in exactly one worker: it schedules the reaper (settings.reaper_interval_s).
        command.append("-B")
        if schedule_file is not None:
            command += ["-s", str(schedule_file)]
    return command


def child_env(settings: Settings) -> dict[str, str]:
    """This process's environment, with the data dir pinned to an absolute path so that a
    child in any working directory reads the same database, broker and artifacts."""
    env = dict(os.environ)
    env["CUSET_DATA_DIR"] = str(Path(settings.data_dir).resolve())
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class WorkerChild:
    """A ``celery worker`` child in a process group of its own (the terminal's Ctrl-C does not
    reach it directly; we stop it ourselves, after the API)."""

    process: subprocess.Popen
    log_path: Path

    @classmethod
    def start(cls, settings: Settings, spec: EmbeddedWorker) -> WorkerChild:
        data_dir = Path(settings.data_dir).resolve()
        log_path = data_dir / "logs" / spec.log_name
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log: IO[bytes] = open(log_path, "ab")
        command = worker_command(
            spec.queues,
            spec.concurrency,
            beat=spec.beat,
            schedule_file=data_dir / "celerybeat-schedule",
            hostname=spec.hostname,
        )
        process = subprocess.Popen(
            command,
            env=child_env(settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()  # the child holds its own descriptor
        return cls(process, log_path)

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout_s: float = 30.0) -> int:
        """Warm shutdown: SIGTERM to the Celery main process (it stops taking tasks and lets its
        pool finish the running ones) and to the training runs below the pool (each saves a
        checkpoint and exits, so its task requeues the job); SIGKILL what is left after
        ``timeout_s`` seconds. The pool processes themselves get no SIGTERM: it would kill the
        tasks that supervise those runs before they record the result."""
        if self.running():
            self.process.send_signal(signal.SIGTERM)
            pool = set(_children(self.process.pid))
            runs = _group_members(self.process.pid) - pool - {self.process.pid}
            for pid in runs:
                _signal(pid, signal.SIGTERM)
            # A run whose step outlasts the stop is killed a little before the deadline, so the
            # task supervising it still records the job (requeued from its last checkpoint)
            # instead of dying with it and leaving the job ``running``.
            first = max(0.0, timeout_s - TRAINING_KILL_MARGIN_S) if runs else timeout_s
            try:
                self.process.wait(first)
            except subprocess.TimeoutExpired:
                for pid in runs:
                    _signal(pid, signal.SIGKILL)
                try:
                    self.process.wait(timeout_s - first)
                except subprocess.TimeoutExpired:
                    self.kill()
                    self.process.wait(10)
        # Pool children or a training run may outlive the main worker process.
        self.kill()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the worker's process group now."""
        self._signal_group(signal.SIGKILL)

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:
            pass


def _proc_stats() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process, from Linux's /proc (empty elsewhere)."""
    stats = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        stats[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return stats


def _children(pid: int) -> list[int]:
    return [child for child, (parent, _) in _proc_stats().items() if parent == pid]


def _group_members(pgid: int) -> set[int]:
    return {pid for pid, (_, group) in _proc_stats().items() if group == pgid}


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _raise_stop(signum: int, _frame) -> None:
    raise StopRequested(signal.Signals(signum).name)


def _server_class():
    """``uvicorn.Server`` that, on the first SIGINT/SIGTERM, sets the shutdown flag and calls
    ``on_stop`` (which starts stopping the workers) before its graceful shutdown, and on a second
    signal of either kind stops waiting for connections (uvicorn forces only on a second SIGINT)."""
    import uvicorn

    class Server(uvicorn.Server):
        def __init__(self, config, on_stop=None):
            super().__init__(config)
            self.on_stop = on_stop

        def handle_exit(self, sig, frame) -> None:
            from api import shutdown

            first = not self.should_exit
            shutdown.begin()
            super().handle_exit(sig, frame)
            if first:
                if self.on_stop is not None:
                    self.on_stop()
            else:
                self.force_exit = True
                if self.on_stop is not None:
                    self.on_stop(force=True)

    return Server


def urls(host: str, port: int) -> dict[str, str]:
    """Where the service answers (a wildcard bind is shown as loopback)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    base = f"http://{shown}:{port}"
    return {"API": f"{base}/v1", "API docs": f"{base}/docs", "dashboard": f"{base}/"}


def serve(
    settings: Settings,
    host: str = "127.0.0.1",
    port: int = 8000,
    with_worker: bool = True,
    concurrency: int = 2,
    log_level: str = "info",
    stop_timeout_s: float = STOP_TIMEOUT_S,
    echo=print,
    cpu_concurrency: int = 1,
) -> int:
    """Migrate, start the workers (:func:`embedded_workers`), serve the API until a signal;
    returns the exit status (0 after a requested stop, 1 when a worker died on its own)."""
    import uvicorn

    from api import shutdown
    from api.main import create_app

    if not settings.auth and host not in LOOPBACK:
        raise ValueError(f"CUSET_AUTH=false serves every caller as one owner: bind a loopback address, not {host}")
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    workers: list[WorkerChild] = []
    died: list[WorkerChild] = []  # workers that exited on their own
    stopping = threading.Event()
    stoppers: list[threading.Thread] = []
    shutdown.reset()

    def stop_workers(force: bool = False) -> None:
        """Start stopping every worker side by side (once), so the whole stop takes
        stop_timeout_s at most, not that per worker; ``force`` kills them now."""
        if force:
            for worker in workers:
                worker.kill()
            return
        if stopping.is_set():
            return
        stopping.set()
        if workers:
            echo(f"stopping the workers (up to {stop_timeout_s:.0f} s; a second Ctrl-C kills them)")
        for worker in workers:
            stopper = threading.Thread(target=worker.stop, args=(stop_timeout_s,), daemon=True)
            stopper.start()
            stoppers.append(stopper)

    try:
        data_dir = Path(settings.data_dir).resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        echo(f"database:  {_redact(settings.resolved_database_url)}")
        echo(f"broker:    {_redact(settings.resolved_broker_url)}")
        upgrade(settings.resolved_database_url)
        prepare_broker(settings)  # before the workers and the API share it
        config = uvicorn.Config(
            shutdown.ShutdownGuard(create_app(settings)),
            host=host,
            port=port,
            log_level=log_level,
            timeout_graceful_shutdown=API_GRACE_S,
        )
        server = _server_class()(config, on_stop=stop_workers)
        if with_worker:
            for spec in embedded_workers(concurrency, cpu_concurrency):
                worker = WorkerChild.start(settings, spec)
                workers.append(worker)
                what = f"{spec.concurrency} process{'es' if spec.concurrency > 1 else ''}" + (
                    ", reaper schedule" if spec.beat else ""
                )
                echo(
                    f"worker:    pid {worker.process.pid}, queues {','.join(spec.queues)} ({what}), log {worker.log_path}"
                )
                threading.Thread(target=_watch, args=(worker, server, died, stopping), daemon=True).start()
        echo(f"sandbox:   {_sandbox_line()}")
        for name, url in urls(host, port).items():
            echo(f"{name + ':':11}{url}")
        if settings.auth:
            first = _first_key(settings.resolved_database_url)
            if first:
                echo(f"API key:   {first}  (the first key, shown once: store it; `cuset keys create` makes more)")
            else:
                echo("API keys:  `cuset keys create --name NAME`; send `Authorization: Bearer <key>` to /v1")
        server.run()  # returns after SIGINT/SIGTERM, then re-raises it into _raise_stop
    except StopRequested:
        pass
    finally:
        shutdown.begin()
        # A further Ctrl-C / SIGTERM while the workers wind down kills them at once.
        for sig in previous:
            signal.signal(sig, lambda *_: stop_workers(force=True))
        stop_workers()  # already under way after a signal; not when a worker died or startup failed
        for stopper in stoppers:
            stopper.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for worker in died:
        echo(f"a worker exited with status {worker.process.returncode}; see {worker.log_path}")
    return 1 if died else 0


def _first_key(database_url: str) -> str | None:
    """On a database without any active key, create one and return it (only then)."""
    with session_scope(database_url) as session:
        if has_keys(session):
            return None
        return create_key(session, "first", owner=DEFAULT_OWNER).secret


def _watch(worker: WorkerChild, server, died: list[WorkerChild], stopping: threading.Event) -> None:
    """Stop the API when a worker exits on its own: a service without one of its workers leaves
    the queues of that worker unserved."""
    worker.process.wait()
    if not stopping.is_set() and not server.should_exit:
        died.append(worker)
        server.should_exit = True


def _sandbox_line() -> str:
    """What verification can do on this machine, for the banner (the worker child runs here too)."""
    from cuset_core.verify.sandbox import isolation
    from cuset_core.verify.settings import SandboxSettings

    state = isolation()
    if state.available:
        return state.describe()
    if SandboxSettings().allow_unisolated:
        return f"{state.describe()}; CUSET_SANDBOX_ALLOW_UNISOLATED is set: candidates run WITHOUT isolation"
    return f"{state.describe()}; tiers 1-3 will refuse every candidate (see docs/deploy.md)"


def _redact(url: str) -> str:
    """``url`` without its password."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest.split("/", 1)[0]:
        credentials, _, host = rest.partition("@")
        user, has_password, _ = credentials.partition(":")
        return f"{scheme}{sep}{user}{':***' if has_password else ''}@{host}"
    return url
