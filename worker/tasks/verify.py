"""``cuset.verify_sample`` (cpu queue: tiers static, compile, cpu) and ``cuset.verify_gpu`` (infer
queue: tier gpu): verify one attempt of a ``/v1/generate`` row against its problem.

Attempts of one row are verified concurrently, as they finish decoding, each writing its result
into the row's ``samples`` JSON under the row lock so one result never overwrites another. After
each result ``service.generation_settle.settle`` decides what follows: a passing attempt may end the request
(``stop_at_first_pass``: attempts not yet verified are cancelled, and their queued messages find
nothing to do), a failing one may get a repair attempt (decoded by ``cuset.generate_repair``), and the
row turns succeeded when every attempt is settled. A verification already running when the
request ends runs to its end and its result is dropped.
"""

from __future__ import annotations

import time

from celery import shared_task

from cuset_core.verify.readiness import VerifierBroken, stop_if_broken
from cuset_core.verify.result import Tier
from cuset_core.verify.run import verify
from cuset_core.verify.settings import VerifySettings
from db.errors import ErrorCode
from db.generation_rows import generation_request, load_samples, locked_generation
from db.models import Generation
from db.session import session_scope
from db.settings import Settings
from db.statuses import GenerationStatus
from service.dispatch import TaskName
from service.generation_events import GenerationEvent, fail_generations, publish
from service.generation_settle import decode_repairs, settle
from worker.runtime import RuntimeTask, WorkerRuntime

LIVE = (
    GenerationStatus.RUNNING,
    GenerationStatus.VERIFYING,
)  # a row still decoding its drawn samples can verify finished ones


@shared_task(name=TaskName.VERIFY_SAMPLE, base=RuntimeTask, bind=True)
def verify_sample(self: RuntimeTask, generation_id: str, index: int) -> None:
    _verify(self.runtime, generation_id, index)


@shared_task(name=TaskName.VERIFY_GPU, base=RuntimeTask, bind=True)
def verify_gpu(self: RuntimeTask, generation_id: str, index: int) -> None:
    _verify(self.runtime, generation_id, index)


def service_verify_settings(settings: Settings, verify_settings: VerifySettings) -> VerifySettings:
    """``verify_settings`` with what the service keeps on disk hidden from candidates."""
    hidden = tuple(str(path) for path in settings.sandbox_hidden_paths())
    return verify_settings.model_copy(update={"limits": verify_settings.limits.model_copy(update={"hidden": hidden})})


def _verify(runtime: WorkerRuntime, generation_id: str, index: int) -> None:
    settings = runtime.settings
    url = settings.resolved_database_url
    with session_scope(url) as session:
        row = session.get(Generation, generation_id)
        if row is None or row.status not in LIVE:
            return  # finished (perhaps by another attempt's pass) or failed
        request = generation_request(row)
        attempt = load_samples(session, generation_id)[index]
        if attempt.settled:
            return  # a redelivered message for an attempt already verified, or a cancelled one
    if request.problem is None:  # the API asks every verified request for its problem
        raise ValueError(f"generation {generation_id} asks for verification but holds no problem")
    checks = service_verify_settings(settings, VerifySettings(tier=Tier(request.verify), policy=request.policy))
    result = verify(request.problem, attempt.text, checks, cache_dir=settings.verify_cache_dir, warm=runtime.warm_sides)
    try:
        stop_if_broken(result)
    except VerifierBroken as broken:  # every other candidate would meet the same fault: stop the request
        fail_generations(settings, [generation_id], ErrorCode.VERIFIER_UNAVAILABLE, str(broken))
        return
    with session_scope(url) as session:
        row = locked_generation(session, generation_id)
        if row is None or row.status not in LIVE:
            return
        samples = load_samples(session, generation_id)
        if samples[index].settled:
            return
        samples[index].verification = result
        steps = settle(session, row, request, samples, time.time())
        changed = [samples[i] for i in sorted({index, *steps.cancel, *(r.index for r in steps.repairs)})]
        status = row.status
    publish(settings, generation_id, GenerationEvent(samples=changed, status=status))
    decode_repairs(settings, generation_id, steps.repairs)
