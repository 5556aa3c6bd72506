"""The worker's Celery app: ``celery -A worker.app worker -Q train,infer,cpu`` (or any subset).

The task modules are listed in ``include``: Celery imports them when a worker starts, and they
declare their tasks with ``shared_task``, so no task module imports this one and this one
imports no task module. The worker's settings (the service's and the sandbox's) are read from
its environment once, here, at its edge; every process that runs tasks builds its
:class:`~worker.runtime.WorkerRuntime` from them when it starts (the main process for the solo
and thread pools, each child of a prefork pool).
"""

from __future__ import annotations

import logging
import os
import threading

from celery import bootsteps
from celery.signals import worker_init, worker_process_init, worker_ready, worker_shutdown

from cuset_core.verify.readiness import tier2_readiness
from cuset_core.verify.sandbox import isolation, log_isolation
from cuset_core.verify.settings import SandboxSettings
from db.settings import get_settings
from db.worker_status import forget_sandbox, record_sandbox
from service.dispatch import make_celery
from worker.runtime import start_runtime

TASK_MODULES = [
    "worker.tasks.confidence",
    "worker.tasks.evals",
    "worker.tasks.generate",
    "worker.tasks.reaper",
    "worker.tasks.tune",
    "worker.tasks.validate",
    "worker.tasks.verify",
]

settings = get_settings()
sandbox_settings = SandboxSettings()
app = make_celery(settings)
app.conf.include = TASK_MODULES
_pool = {"size": 1}  # the pool's process count, set in the main process before the children fork


def torch_threads(cores: int, pool_size: int) -> int:
    """Intra-op threads of each pool process: its share of the cores, at least one.

    Each pool process decodes or verifies on its own; with torch's default (every core in every
    process) they fight over the cores, and OpenMP threads that wait for a descheduled sibling
    make a decoding step several times slower than on one thread.
    """
    return max(1, cores // max(1, pool_size))


@worker_init.connect
def _start_worker(sender=None, **_kwargs) -> None:
    concurrency = getattr(sender, "concurrency", None)
    _pool["size"] = concurrency if isinstance(concurrency, int) and concurrency > 0 else 1
    start_runtime(settings)  # tasks run here with the solo and thread pools


@worker_process_init.connect
def _start_pool_process(**_kwargs) -> None:
    """A runtime of this pool process's own (its models are its own), and its share of the
    cores, unless the operator set OMP_NUM_THREADS."""
    start_runtime(settings)
    if os.environ.get("OMP_NUM_THREADS"):
        return
    import torch

    torch.set_num_threads(torch_threads(len(os.sched_getaffinity(0)), _pool["size"]))


_probing = threading.Lock()  # one tier-2 probe at a time in this process
_stopping = threading.Event()  # set at shutdown: a probe that ends later records nothing
_logger = logging.getLogger("cuset.worker")
_last_tier2: dict[str, str | None] = {}  # hostname -> the last reason tier 2 could not run (None: it ran)


def _hostname(worker) -> str:
    return getattr(worker, "hostname", None) or f"worker-{os.getpid()}"


def probe_and_record(hostname: str) -> None:
    """Probe the sandbox and, where candidates would run in it, tier 2's real side (the verifier's
    interpreter importing torch there: ``readiness.tier2_readiness``, kept a few minutes), and
    record both for ``/readyz``; logged at start and whenever tier 2's state changes. A probe
    still running in this process makes this one return at once."""
    if not _probing.acquire(blocking=False):
        return
    try:
        state, allow = isolation(), sandbox_settings.allow_unisolated
        tier2 = None
        if state.available or allow:
            ready = tier2_readiness()
            tier2 = None if ready.ready else ready.reason
            if hostname not in _last_tier2 or _last_tier2[hostname] != tier2:
                if tier2 is None:
                    _logger.info("verification: tier 2's side runs in the sandbox")
                else:
                    _logger.error("verification NOT READY: %s; every tier-2 check would end in internal_error", tier2)
            _last_tier2[hostname] = tier2
        if not _stopping.is_set():
            record_sandbox(settings, hostname, state.available, state.reason, allow, tier2=tier2)
    finally:
        _probing.release()


@worker_ready.connect
def _check_sandbox(sender=None, **_kwargs) -> None:
    """Probe the verification sandbox once at start: log it (loudly when tiers 1-3 will refuse,
    or when the operator opted out of isolation) and record it for ``/readyz``; then, in a thread
    of its own (a torch import takes seconds), run tier 2's real side and record that."""
    state = log_isolation(sandbox_settings, _logger)
    hostname = _hostname(sender)
    record_sandbox(settings, hostname, state.available, state.reason, sandbox_settings.allow_unisolated)
    threading.Thread(target=probe_and_record, args=(hostname,), name="cuset-tier2-probe", daemon=True).start()


class SandboxProbe(bootsteps.StartStopStep):
    """Probe the sandbox and tier 2's side again every ``sandbox_probe_interval_s`` on the worker's
    own timer and record it, so ``/readyz`` follows a fix (bubblewrap installed, the venv repaired)
    or a breakage without a restart. A failed isolation probe is really run again only after
    ``REPROBE_FAILURE_S`` (see ``isolation``); tier 2's side after ``readiness.READY_TTL_S`` when
    it ran, ``NOT_READY_TTL_S`` when it did not. The probe runs in a thread, never in the timer's."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker, **kwargs) -> None:
        super().__init__(worker, **kwargs)
        self.timer_ref = None

    def start(self, worker) -> None:
        self.timer_ref = worker.timer.call_repeatedly(settings.sandbox_probe_interval_s, self.probe, (worker,))

    def stop(self, worker) -> None:
        if self.timer_ref is not None:
            self.timer_ref.cancel()

    def probe(self, worker) -> threading.Thread:
        thread = threading.Thread(target=probe_and_record, args=(_hostname(worker),), name="cuset-tier2-probe")
        thread.daemon = True
        thread.start()
        return thread


app.steps["worker"].add(SandboxProbe)


@worker_shutdown.connect
def _forget_sandbox(sender=None, **_kwargs) -> None:
    _stopping.set()
    forget_sandbox(settings, getattr(sender, "hostname", None) or f"worker-{os.getpid()}")
