"""Reference runs shared by one batch of candidates: one run per (tier, problem, job), under a
secret seed drawn per pool; candidates' own fields never split a batch. The last test runs real
candidates through tier 2 on one shared reference."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.execution.contracts import CandidateJob, CpuJob, HarnessJob, PrebuildExtension, ReferenceReport
from cuset_core.verify.execution.judge import harness_env
from cuset_core.verify.execution.reference_pool import ReferencePool, reference_key
from cuset_core.verify.execution.tier_run import ReferenceRun, TierSpec
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.sandbox import SandboxCancelled
from cuset_core.verify.settings import SandboxLimits, VerifySettings

SPEC = TierSpec(Tier.CPU, "cuset_core.verify.cpu.harness", SandboxLimits(), lambda folder: harness_env())
JOB = CpuJob(
    kind="python",
    seeds=3,
    reduce_sizes=True,
    max_elements=1 << 20,
    preludes=["preludes/bridge"],
    include_dirs=["torch/include"],
    library_dirs=["torch/lib"],
)
PROBLEM = "import torch\nN = 8\n"


class Runs:
    """A stand-in for the reference side: records the jobs it was handed."""

    def __init__(self) -> None:
        self.jobs: list[HarnessJob] = []

    def __call__(self, job: HarnessJob) -> ReferenceRun:
        self.jobs.append(job)
        return ReferenceRun(
            inputs=b"inputs", expected=[[]], report=ReferenceReport(verdict=Verdict.PASS), input_seed=job.input_seed
        )


def test_the_candidates_of_one_problem_share_one_reference_run_under_one_drawn_seed():
    pool, runs = ReferencePool(), Runs()
    first, ran = pool.reference(SPEC, PROBLEM, JOB, runs)
    again, ran_again = pool.reference(SPEC, PROBLEM, JOB, runs)
    assert again is first and (ran, ran_again) == (True, False) and pool.runs == 1
    assert runs.jobs[0].input_seed is not None  # drawn by the pool, not left to the side


def test_fields_only_the_candidate_and_build_sides_read_do_not_split_the_batch():
    other = JOB.model_copy(
        update={
            "candidate": "candidate.py",
            "handed": CandidateJob(overrides={"N": 4}),
            "prebuild": [PrebuildExtension(cuda="__global__ void k() {}", cpp="")],
        }
    )
    assert reference_key(SPEC, PROBLEM, other) == reference_key(SPEC, PROBLEM, JOB)


@pytest.mark.parametrize(
    "change",
    [
        {"problem": "import torch\nN = 9\n"},
        {"job": {"reduce_sizes": False}},
        {"job": {"seeds": 5}},
        {"job": {"input_seed": 7}},
        {"spec": Tier.GPU},
    ],
    ids=["problem", "original sizes", "trials", "fixed seed", "tier"],
)
def test_a_different_problem_job_or_tier_runs_its_own_reference(change):
    pool, runs = ReferencePool(), Runs()
    pool.reference(SPEC, PROBLEM, JOB, runs)
    spec = TierSpec(change["spec"], SPEC.module, SPEC.limits, SPEC.env) if "spec" in change else SPEC
    pool.reference(spec, change.get("problem", PROBLEM), JOB.model_copy(update=change.get("job", {})), runs)
    assert pool.runs == 2


def test_a_seed_the_settings_fix_is_kept_and_two_pools_draw_their_own():
    runs = Runs()
    ReferencePool().reference(SPEC, PROBLEM, JOB.model_copy(update={"input_seed": 7}), runs)
    assert runs.jobs[0].input_seed == 7
    drawn = set()
    for _ in range(5):
        ReferencePool().reference(SPEC, PROBLEM, JOB, runs)
        drawn.add(runs.jobs[-1].input_seed)
    assert len(drawn) > 1  # a new batch draws new inputs


def test_an_unsupported_problem_is_kept_for_the_batch_and_the_oldest_run_is_dropped_past_capacity():
    refused = VerifyResult(verdict=Verdict.UNSUPPORTED, tier=Tier.CPU, reason="the problem does not fit")
    pool = ReferencePool(capacity=2)
    assert pool.reference(SPEC, PROBLEM, JOB, lambda job: refused) == (refused, True)
    assert pool.reference(SPEC, PROBLEM, JOB, Runs()) == (refused, False)
    runs = Runs()
    for n in (1, 2):
        pool.reference(SPEC, f"N = {n}\n", JOB, runs)
    pool.reference(SPEC, PROBLEM, JOB, runs)  # dropped: run again
    assert len(runs.jobs) == 3


def test_a_reference_that_broke_is_run_again_for_the_next_candidate():
    broke = VerifyResult(verdict=Verdict.INTERNAL_ERROR, tier=Tier.CPU, reason="the reference side timed out")
    pool, runs = ReferencePool(), Runs()
    assert pool.reference(SPEC, PROBLEM, JOB, lambda job: broke) == (broke, True)
    again, ran = pool.reference(SPEC, PROBLEM, JOB, runs)
    assert ran and isinstance(again, ReferenceRun) and len(runs.jobs) == 1


def test_a_candidate_that_needs_a_reference_another_thread_is_running_waits_for_that_run():
    pool, runs, started, release = ReferencePool(), Runs(), threading.Event(), threading.Event()

    def slow(job: HarnessJob) -> ReferenceRun:
        started.set()
        release.wait(30)
        return runs(job)

    def never(job: HarnessJob) -> ReferenceRun:
        raise AssertionError("a second run of a reference already running")

    with ThreadPoolExecutor(max_workers=2) as threads:
        first = threads.submit(pool.reference, SPEC, PROBLEM, JOB, slow)
        assert started.wait(30)
        second = threads.submit(pool.reference, SPEC, PROBLEM, JOB, never)
        assert not second.done() and pool.in_flight() == 1
        release.set()
        (run, ran), (shared, ran_again) = first.result(30), second.result(30)
    assert shared is run and (ran, ran_again) == (True, False)
    assert pool.runs == 1 and pool.in_flight() == 0


def test_a_candidate_waiting_for_a_run_that_is_cancelled_runs_its_own():
    pool, runs, started, release = ReferencePool(), Runs(), threading.Event(), threading.Event()

    def cancelled(job: HarnessJob) -> ReferenceRun:
        started.set()
        release.wait(30)
        raise SandboxCancelled("the reference side was cancelled")

    with ThreadPoolExecutor(max_workers=2) as threads:
        first = threads.submit(pool.reference, SPEC, PROBLEM, JOB, cancelled)
        assert started.wait(30)
        second = threads.submit(pool.reference, SPEC, PROBLEM, JOB, runs)
        release.set()
        with pytest.raises(SandboxCancelled):
            first.result(30)
        own, ran = second.result(30)
    assert ran and isinstance(own, ReferenceRun) and len(runs.jobs) == 1 and pool.runs == 1


CASES = Path(__file__).parent / "cpu_cases"


def _add_candidate(body: str) -> str:
    cuda = (CASES / "add_kernel.cu").read_text().replace("out[i] = a[i] + b[i];", body)
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
cuda_src = r"""
{cuda}
"""
ext = load_inline(name="case_ext", cpp_sources="torch::Tensor run(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=cuda_src, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.run(a, b)
'''


@pytest.mark.slow
def test_a_right_and_a_wrong_kernel_are_judged_on_one_shared_reference_run():
    problem = (CASES / "add_problem.py").read_text()
    settings = VerifySettings(tier=Tier.CPU, limits=SandboxLimits(wall_s=120, cpu_s=120))
    pool = ReferencePool()
    right = run_cpu_tier(problem, parse_candidate(_add_candidate("out[i] = a[i] + b[i];")), settings, references=pool)
    wrong = run_cpu_tier(problem, parse_candidate(_add_candidate("out[i] = a[i] - b[i];")), settings, references=pool)
    assert right.verdict is Verdict.PASS, right.reason + right.log
    assert wrong.verdict is Verdict.VALUE_MISMATCH, wrong.reason
    assert pool.runs == 1
    # The first paid for the reference run; the second only looked it up.
    assert right.timings_s["cpu_reference"] > 0.5 and wrong.timings_s["cpu_reference"] < 0.1
