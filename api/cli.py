"""The service's commands in the `cuset` CLI: ``serve`` (everything in one process), and the
pieces compose runs separately: ``migrate`` and ``worker``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from service.dispatch import INFER_QUEUE, LEGACY_GPU_QUEUE, QUEUES, TRAIN_QUEUE, prepare_broker


def service_settings(data_dir: Path | None):
    """Settings from the environment; ``--data-dir`` wins over ``CUSET_DATA_DIR`` and is
    exported so that children (worker, training runs) see the same folder."""
    from db.settings import get_settings

    if data_dir is not None:
        os.environ["CUSET_DATA_DIR"] = str(data_dir.resolve())
    return get_settings()


DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="embedded database, broker and artifacts (default: CUSET_DATA_DIR or ~/.cuset)"),
]


def serve(
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port")] = 8000,
    worker: Annotated[bool, typer.Option("--worker/--no-worker", help="start a Celery worker child")] = True,
    concurrency: Annotated[
        int, typer.Option(min=1, help="train/infer worker processes (a tune or a generation holds one)")
    ] = 2,
    cpu_concurrency: Annotated[
        int, typer.Option(min=1, help="processes of the cpu worker: validation, tiers 0-2, bookkeeping")
    ] = 1,
    data_dir: DataDirOption = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
) -> None:
    """Run the API, a worker and the broker as one service (SQLite under the data dir unless
    CUSET_DATABASE_URL / CUSET_BROKER_URL say otherwise). Ctrl-C or SIGTERM stops it all."""
    from api.embedded import serve as run_service

    try:
        status = run_service(
            service_settings(data_dir),
            host=host,
            port=port,
            with_worker=worker,
            concurrency=concurrency,
            cpu_concurrency=cpu_concurrency,
            log_level=log_level,
            echo=typer.echo,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--host") from None
    raise typer.Exit(status)


def migrate(data_dir: DataDirOption = None) -> None:
    """Bring the configured database to the newest schema (Alembic upgrade head)."""
    from db.migrate import upgrade

    settings = service_settings(data_dir)
    upgrade(settings.resolved_database_url)
    typer.echo("database at the newest schema")


def worker_queues(queues: str) -> tuple[str, ...]:
    """The queues a ``--queues`` value names, in order; the old ``gpu`` stands for train and infer
    (kept for one release so that existing deployments start), with a warning."""
    wanted: list[str] = []
    for name in (q.strip() for q in queues.split(",") if q.strip()):
        if name == LEGACY_GPU_QUEUE:
            typer.echo(
                f"warning: queue {LEGACY_GPU_QUEUE!r} is now {TRAIN_QUEUE!r} and {INFER_QUEUE!r}; serving both",
                err=True,
            )
            wanted += [TRAIN_QUEUE, INFER_QUEUE]
        elif name in QUEUES:
            wanted.append(name)
        else:
            raise typer.BadParameter(f"queues must be among {', '.join(QUEUES)}; got {name!r}", param_hint="--queues")
    if not wanted:
        raise typer.BadParameter(f"name at least one of {', '.join(QUEUES)}", param_hint="--queues")
    return tuple(dict.fromkeys(wanted))


def worker(
    queues: Annotated[
        str, typer.Option(help="comma-separated queues: train (tuning), infer (decoding, tier 3), cpu")
    ] = ",".join(QUEUES),
    concurrency: Annotated[
        int, typer.Option(min=1, help="pool processes; 1 for a train or infer worker that owns a GPU")
    ] = 2,
    beat: Annotated[
        bool, typer.Option("--beat/--no-beat", help="also schedule the reaper (run it in ONE worker)")
    ] = False,
    name: Annotated[
        str | None, typer.Option(help="Celery node name, unique per host (default <queues>@<host>)")
    ] = None,
    data_dir: DataDirOption = None,
    log_level: Annotated[str, typer.Option(help="Celery log level")] = "INFO",
) -> None:
    """Run a Celery worker in the foreground (it replaces this process)."""
    from api.embedded import child_env, worker_command

    wanted = worker_queues(queues)
    settings = service_settings(data_dir)
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    prepare_broker(settings)
    command = worker_command(
        wanted,
        concurrency,
        beat=beat,
        log_level=log_level,
        schedule_file=Path(settings.data_dir).resolve() / "celerybeat-schedule",
        hostname=name or f"{'-'.join(wanted)}@%h",
    )
    os.execve(command[0], command, child_env(settings))


def register(app: typer.Typer) -> None:
    """Add the service's commands to ``app``."""
    app.command("serve")(serve)
    app.command("migrate")(migrate)
    app.command("worker")(worker)
