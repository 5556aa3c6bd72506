"""Sides started ahead of the checks that take them (``WarmSides``): each is handed out once, a
side that ended while it waited is never handed out, replacements start only when a check asks
for them, and closing kills whatever still waits. Real checks on warm sides: a worker's second
check (tests/fast/test_worker_tasks.py) and a batch's next candidate
(tests/security/test_batch_isolation.py)."""

from __future__ import annotations

import time

from cuset_core.verify.cpu import HARNESS_MODULE, harness_environment
from cuset_core.verify.execution.tier_run import TierSpec, WarmSides
from cuset_core.verify.result import Tier
from cuset_core.verify.settings import SandboxLimits

LIMITS = SandboxLimits(wall_s=60, cpu_s=60)
# A side that waits for its files as tier 2's does (the real harness, importing torch meanwhile).
WAITING = TierSpec(Tier.CPU, HARNESS_MODULE, LIMITS, harness_environment, early_start=True)
# A "harness" that ends at once, as a side that died while it waited.
ENDING = TierSpec(Tier.CPU, "json.tool", LIMITS, harness_environment, early_start=True)


def ready_within(warm: WarmSides, count: int, seconds: float = 30.0) -> bool:
    """Whether ``warm`` holds ``count`` started sides within ``seconds`` (refills start in a thread)."""
    deadline = time.monotonic() + seconds
    while len(warm.waiting()) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(warm.waiting()) == count


def test_a_side_is_started_only_once_a_check_asked_for_one_and_is_handed_out_once():
    with WarmSides() as warm:
        warm.refill()
        assert not ready_within(warm, 1, seconds=1.0)  # nobody asked: nothing is started
        assert warm.take(WAITING, "candidate") is None  # the first check starts its own
        warm.refill()
        assert ready_within(warm, 1)
        side = warm.take(WAITING, "candidate")
        assert side is not None and side.alive() and warm.taken == 1
        with side:
            assert warm.take(WAITING, "candidate") is None  # never the same process twice
            assert warm.take(WAITING, "reference") is None  # another kind of side is not interchangeable
        assert not side.alive() and not side.folder.exists()


def test_a_side_that_ended_while_it_waited_is_never_handed_out():
    with WarmSides() as warm:
        assert warm.take(ENDING, "candidate") is None
        warm.refill()
        assert ready_within(warm, 1)
        [waiting] = warm.waiting()
        deadline = time.monotonic() + 30
        while waiting.alive() and time.monotonic() < deadline:  # json.tool fails on its arguments at once
            time.sleep(0.05)
        assert not waiting.alive()
        assert warm.take(ENDING, "candidate") is None
        assert warm.taken == 0 and warm.waiting() == []


def test_closing_kills_the_sides_that_still_wait_and_removes_their_folders():
    warm = WarmSides(per_side=2)
    warm.take(WAITING, "candidate")
    warm.take(WAITING, "candidate")
    warm.refill()
    assert ready_within(warm, 2)
    folders = [side.folder for side in warm.waiting()]
    warm.close()
    assert warm.waiting() == [] and not any(folder.exists() for folder in folders)
    warm.take(WAITING, "candidate")
    warm.refill()
    assert not ready_within(warm, 1, seconds=1.0)  # a closed pool starts nothing


def test_sides_of_a_kind_no_check_asks_for_any_more_give_way_to_new_ones():
    other = TierSpec(Tier.CPU, HARNESS_MODULE, LIMITS.model_copy(update={"wall_s": 61}), harness_environment)
    with WarmSides() as warm:
        warm.take(WAITING, "candidate")
        warm.take(WAITING, "reference")
        warm.refill()
        assert ready_within(warm, 2)
        oldest, newer = warm.waiting()
        warm.take(other, "candidate")  # checks under other settings from now on
        warm.refill()
        deadline = time.monotonic() + 30
        while oldest in warm.waiting() and time.monotonic() < deadline:
            time.sleep(0.05)
        # Two sides per check at once, however many kinds were asked for: the oldest gave way.
        assert warm.waiting()[0] is newer and len(warm.waiting()) == 2 and not oldest.alive()
        assert warm.take(other, "candidate") is not None


def test_with_several_checks_at_once_each_takes_a_side_of_its_own():
    with WarmSides(per_side=2) as warm:
        warm.take(WAITING, "candidate")
        warm.take(WAITING, "candidate")
        warm.refill()
        assert ready_within(warm, 2)
        first, second = warm.take(WAITING, "candidate"), warm.take(WAITING, "candidate")
        assert first is not None and second is not None and first is not second
        assert first.alive() and second.alive() and warm.taken == 2
        first.close()
        second.close()
