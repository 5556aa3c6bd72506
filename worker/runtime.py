"""What a worker process holds for its tasks: its settings, its model cache, its share of the
device and its warm tier-2 sides, built once when the process starts (``worker/app.py``'s start
signals), never at import.

Tasks reach it as ``self.runtime`` through their base class::

    @shared_task(name=TaskName.GENERATE, base=RuntimeTask, bind=True)
    def generate(self: RuntimeTask, generation_id: str) -> None:
        settings = self.runtime.settings

Tests start a runtime of their own settings with :func:`start_runtime` (and end it with
:func:`stop_runtime`) and call the tasks as functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from celery import Task

from cuset_core.verify.execution.tier_run import WarmSides
from db.settings import Settings
from worker.device_share import free_device, hold
from worker.model_cache import ModelCache


@dataclass
class WorkerRuntime:
    """One worker process's state. ``models`` keeps one base model (and its adapters) loaded
    between tasks; the device is shared with training runs through Redis (worker/device_share.py)."""

    settings: Settings
    models: ModelCache = field(default_factory=ModelCache)
    # Tier-2 sides started after each check for the next one (a worker runs one check at a time);
    # None where the settings turn them off.
    warm_sides: WarmSides | None = None

    def __post_init__(self) -> None:
        if self.settings.warm_sides and self.warm_sides is None:
            self.warm_sides = WarmSides()

    def loaded_models(self) -> ModelCache:
        """The model cache, with this process known as a holder of its device (once per process),
        so that a training run starting on the device can ask it to release the cache."""
        hold(self.settings, self.models)
        return self.models

    def free_device(self) -> list[str]:
        """Release this process's models and ask every other holder of the device for theirs;
        returns the holders that kept theirs past ``settings.model_release_timeout_s``."""
        return free_device(self.settings, self.models)


class RuntimeTask(Task):
    """Base class of the worker's tasks: ``self.runtime`` is the process's :class:`WorkerRuntime`."""

    _process_runtime: ClassVar[WorkerRuntime | None] = None

    @property
    def runtime(self) -> WorkerRuntime:
        runtime = RuntimeTask._process_runtime
        if runtime is None:
            raise RuntimeError(
                f"task {self.name} ran in a process without a worker runtime: a worker starts one "
                "(worker/app.py); elsewhere call worker.runtime.start_runtime(settings) first"
            )
        return runtime


def start_runtime(settings: Settings) -> WorkerRuntime:
    """Build this process's runtime from ``settings`` (replacing any earlier one) and return it."""
    runtime = WorkerRuntime(settings)
    RuntimeTask._process_runtime = runtime
    return runtime


def stop_runtime() -> None:
    """Release the process's models and warm sides, and forget its runtime."""
    runtime, RuntimeTask._process_runtime = RuntimeTask._process_runtime, None
    if runtime is not None:
        runtime.models.release()
        if runtime.warm_sides is not None:
            runtime.warm_sides.close()


def process_runtime() -> WorkerRuntime | None:
    """The process's runtime, for the worker's signal handlers (tasks use ``self.runtime``)."""
    return RuntimeTask._process_runtime
