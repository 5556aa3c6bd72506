"""Tier 3 harness: the two sandboxed sides of the KernelBench protocol on a real GPU (see ``judge``).

``python -m cuset_core.verify.gpu.harness SIDE JOB_JSON`` with SIDE one of:

- ``reference``: TF32 off (``matmul.allow_tf32``, ``cudnn.allow_tf32``, precision "highest");
  weights under ``INIT_SEED``; one trial per seed (inputs drawn under ``input_seed + trial``, every
  second trial's floating-point inputs scaled while the outputs stay finite: ``harness_side.trial_outputs``);
  writes the candidate's inputs and the expected outputs; then times eager PyTorch (below).
- ``candidate``: TF32 off; builds the candidate with the real ``torch.utils.cpp_extension``
  (``load_inline`` from its own code, or ``load`` for a ``.cu`` file; a failed build is
  ``compile_error``); ``ModelNew`` under ``INIT_SEED``; every trial on the handed inputs, each
  call on its own copy, under a ``FallbackMonitor`` (outputs must come from its kernels). It
  rejects an output that shares storage with an input (when the reference's does not) and a
  candidate that changes TF32 settings; the profiler must see at least one CUDA kernel the
  candidate defines during a forward (only library kernels: aten, cuBLAS, cuDNN, CUTLASS... is
  a rejection). Then it times itself. The judge compares the outputs, and rejects outputs that
  stay the same when the inputs change.

Timing, on either side: warmup, then ``timing_trials`` calls, each on cloned inputs (rotating
between two input sets so a cached result is wrong), an L2 flush (writing a buffer twice the L2
size) before each, CUDA events around the call with ``torch.cuda.synchronize()`` before the end
event. Speedup = reference mean / candidate mean; the candidate's time is measured in its own
process, so it is informative, never part of the verdict. With ``compile_baseline`` the reference
side also times ``torch.compile(model)`` the same way (its compilation happens in the warmup
calls), for a speedup over torch.compile beside the one over eager.

Anti-hacking rejections use the verdict ``runtime_error`` with a reason starting "anti-hacking:".
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import statistics
import sys
import time
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cuset_core.verify.execution.contracts import (
    INIT_SEED,
    INPUTS_FILE,
    OUTPUTS_FILE,
    REFERENCE_FILE,
    CandidateJob,
    Decided,
    GpuJob,
    Outcome,
    ReferenceDetails,
    TimingStats,
    tail,
    trial_seeds,
    wide_trial,
)
from cuset_core.verify.execution.disguise import CANDIDATE_MODULE
from cuset_core.verify.execution.fallback import FallbackMonitor
from cuset_core.verify.execution.harness_side import (
    aliased_pairs,
    call_forward,
    candidate_factory,
    clone_values,
    first_line,
    run_side,
    trial_outputs,
)
from cuset_core.verify.execution.transfer import load_values, save_values
from cuset_core.verify.result import Verdict

WARMUP_CALLS = 5

_LIBRARY_KERNEL = re.compile(
    r"at::|\bcublas|cutlass|cudnn|xmma|\bgemm|gemv|\bcub::|triton_|\bnvjet|"
    r"^(ampere|volta|turing|hopper|sm\d+)_|elementwise_kernel|reduce_kernel|"
    r"^Memcpy|^Memset|^void (splitKreduce|gemmk1|dot_kernel|scal_kernel)",
    re.IGNORECASE,
)


# ---------------------------------------------------------------- pure checks (unit-tested)


def classify_kernels(event_names: list[str], extension_kernels: list[str]) -> tuple[list[str], list[str]]:
    """Split profiled CUDA kernel names into (candidate's kernels, library kernels).

    A kernel is the candidate's when one of ``extension_kernels`` appears in it as a word;
    when the candidate's kernel names are unknown (macro-generated), any kernel that does not
    look like a library kernel counts.
    """
    custom: list[str] = []
    library: list[str] = []
    for name in event_names:
        if extension_kernels:
            mine = any(re.search(rf"\b{re.escape(k)}\b", name) for k in extension_kernels)
        else:
            mine = _LIBRARY_KERNEL.search(name) is None
        (custom if mine else library).append(name)
    return custom, library


def timing_stats(samples_ms: list[float]) -> TimingStats:
    """Mean, median, std (population), min, max and count of per-call times in milliseconds."""
    if not samples_ms:
        raise ValueError("timing_stats needs at least one sample")
    return TimingStats(
        mean=statistics.fmean(samples_ms),
        median=statistics.median(samples_ms),
        std=statistics.pstdev(samples_ms),
        min=min(samples_ms),
        max=max(samples_ms),
        n=len(samples_ms),
    )


# ---------------------------------------------------------------- GPU protocol


def _tf32_state() -> tuple[bool, bool, str]:
    import torch

    return (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
    )


def _set_tf32_off() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def _check_tf32(expected: tuple[bool, bool, str]) -> None:
    if _tf32_state() != expected:
        changed = _tf32_state()
        raise Decided(Outcome(Verdict.RUNTIME_ERROR, f"anti-hacking: the candidate changed TF32 settings to {changed}"))


def _load_module(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module loader for {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _is_build_failure(exc: BaseException) -> bool:
    text = str(exc)
    return "Error building extension" in text or "undefined symbol" in text or isinstance(exc, ImportError)


def _on(values: list[Any], device: Any) -> list[Any]:
    import torch

    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _l2_flusher(device: Any) -> Callable[[], None]:
    import torch

    properties = torch.cuda.get_device_properties(device)
    l2_bytes = getattr(properties, "L2_cache_size", 0) or (128 << 20)
    buffer = torch.empty(2 * l2_bytes // 4 + 1, dtype=torch.float32, device=device)

    def flush() -> None:
        buffer.fill_(1.0)

    return flush


def _time_calls(model: Any, input_sets: list[list[Any]], trials: int, flush: Callable[[], None]) -> list[float]:
    """Per-call milliseconds over ``trials`` timed calls after warmup (CUDA events)."""
    import torch

    for index in range(WARMUP_CALLS):
        model(*clone_values(input_sets[index % len(input_sets)]))
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for index in range(trials):
        inputs = clone_values(input_sets[index % len(input_sets)])
        flush()
        torch.cuda.synchronize()
        start.record()
        model(*inputs)
        torch.cuda.synchronize()  # work on any stream counts before the end stamp
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return samples


def _timed(model: Any, trials: list[list[Any]], job: GpuJob, device: Any) -> TimingStats:
    """Timing statistics of ``model`` over the first two trials' inputs."""
    input_sets = [_on(inputs, device) for inputs in trials[:2]]
    return timing_stats(_time_calls(model, input_sets, job.timing_trials, _l2_flusher(device)))


# ---------------------------------------------------------------- the reference side


def reference_side(job: GpuJob, workdir: Path, device: Any, timings: dict[str, float]) -> Outcome:
    """Run the reference on every trial's inputs, write them and its outputs, then time it."""
    import torch

    from cuset_core.verify.execution.binding import reference_layout

    _set_tf32_off()
    try:
        problem = _load_module(workdir / "problem.py", "cuset_reference")
        init_inputs = list(problem.get_init_inputs())
        torch.manual_seed(INIT_SEED)
        model = problem.Model(*init_inputs).to(device)
    except Exception as exc:  # noqa: BLE001 - the problem's own code: not the candidate's fault
        raise Decided(
            Outcome(
                Verdict.INTERNAL_ERROR,
                f"the reference construction failed: {first_line(exc)}",
                log=tail(traceback.format_exc()),
            )
        ) from exc
    data: dict[str, Any] = {"init": init_inputs, "trials": []}
    if job.kind == "cu":
        data["layout"] = dataclasses.asdict(reference_layout(model))
        data["weights"] = {name: t.detach().clone() for name, t in [*model.named_parameters(), *model.named_buffers()]}
    outputs, aliases, wide_trials = [], False, []
    clock = time.perf_counter()
    with torch.no_grad():
        for trial, seed in enumerate(trial_seeds(job)):
            torch.manual_seed(seed)
            inputs, produced, wide, aliased = _reference_trial(model, list(problem.get_inputs()), device, trial)
            data["trials"].append(inputs)
            aliases = aliases or aliased
            outputs.append(produced)
            if wide:
                wide_trials.append(trial)
        save_values(workdir / INPUTS_FILE, data)
        save_values(workdir / REFERENCE_FILE, {"trials": outputs})
        timings["reference"] = time.perf_counter() - clock
        clock = time.perf_counter()
        stats = _timed(model, data["trials"], job, device)
        timings["reference_timing"] = time.perf_counter() - clock
        details = ReferenceDetails(
            timing=stats, wide_trials=wide_trials, candidate_job=CandidateJob(reference_aliases=aliases)
        )
        if job.compile_baseline:
            clock = time.perf_counter()
            details = details.model_copy(update=_compile_baseline(model, data["trials"], job, device))
            timings["compile_timing"] = time.perf_counter() - clock
    return Outcome(Verdict.PASS, reference_ms=stats.mean, details=details)


def _reference_trial(model: Any, drawn: list[Any], device: Any, trial: int) -> tuple[list[Any], list[Any], bool, bool]:
    """One trial of the reference on inputs ``drawn`` (wide when ``wide_trial``): its inputs,
    outputs, whether they are wide, and whether an output is a view of an input."""
    sent: list[list[Any]] = []

    def run(values: list[Any]) -> list[Any]:
        sent.append(_on(clone_values(values), device))
        return call_forward(model, sent[-1], "reference", Verdict.INTERNAL_ERROR, settle=_synchronize)

    inputs, produced, wide = trial_outputs(drawn, run, wide_trial(trial))
    return inputs, produced, wide, bool(aliased_pairs(produced, sent[-1]))


def _compile_baseline(model: Any, trials: list[list[Any]], job: GpuJob, device: Any) -> dict[str, Any]:
    """The ``ReferenceDetails`` fields of the reference under ``torch.compile`` (inductor, default
    mode, as KernelBench's torch.compile baseline): its ``compile_timing``, or a ``compile_error``
    when inductor cannot compile the problem (no such baseline, which never decides the verdict)."""
    import torch

    try:
        compiled = torch.compile(model, backend="inductor", mode="default")
        return {"compile_timing": _timed(compiled, trials, job, device)}
    except Exception as exc:  # noqa: BLE001 - a missing baseline is reported, not fatal
        return {"compile_error": first_line(exc)}


# ---------------------------------------------------------------- the candidate side


def _build_candidate(
    job: GpuJob, workdir: Path, monitor: FallbackMonitor, inputs: dict[str, Any], device: Any
) -> Callable[[], Any]:
    """Compile the candidate; return a factory that builds the candidate module on ``device`` (seed it first)."""
    import torch.utils.cpp_extension as cpp_extension

    load, load_inline = cpp_extension.load, cpp_extension.load_inline
    # the candidate's own ``from torch.utils.cpp_extension import load_inline`` gets the counted one
    cpp_extension.load_inline = lambda *args, **kwargs: monitor.wrap_extension(load_inline(*args, **kwargs))
    cpp_extension.load = lambda *args, **kwargs: monitor.wrap_extension(load(*args, **kwargs))
    candidate_path = workdir / job.candidate_file()
    try:
        if job.kind == "cu":
            built = cpp_extension.load(
                name="cuset_cu_candidate", sources=[str(candidate_path)], extra_cuda_cflags=["-O3"], verbose=False
            )
        else:
            built = _load_module(candidate_path, CANDIDATE_MODULE)
    except Exception as exc:  # noqa: BLE001 - any failure to build or import decides the verdict
        verdict = Verdict.COMPILE_ERROR if _is_build_failure(exc) else Verdict.RUNTIME_ERROR
        raise Decided(
            Outcome(
                verdict,
                f"building the candidate failed: {first_line(exc)}",
                log=tail(str(exc) or traceback.format_exc()),
            )
        ) from exc
    binding = None
    if job.kind == "cu":
        from cuset_core.verify.execution.binding import ReferenceLayout

        binding = (ReferenceLayout(**inputs["layout"]), inputs["weights"])
    n_inputs = len(inputs["trials"][0]) if inputs["trials"] else 0
    return candidate_factory(job.kind, built, inputs["init"], candidate_path.read_text(), n_inputs, binding, device)


def _run_trials(
    candidate: Any,
    trials: list[list[Any]],
    job: GpuJob,
    device: Any,
    monitor: FallbackMonitor,
    tf32: tuple[bool, bool, str],
) -> list[list[Any]]:
    """Every trial's outputs (on the CPU), with the checks that need the candidate's process."""
    outputs = []
    for trial, inputs in enumerate(trials):
        new_inputs = _on(clone_values(inputs), device)
        with monitor:
            produced = call_forward(candidate, new_inputs, "candidate", settle=_synchronize)
        _check_tf32(tf32)
        fallback = monitor.fallback_reason(produced)
        if fallback:
            raise Decided(Outcome(Verdict.STATIC_REJECT, f"trial {trial + 1}: {fallback}"))
        aliased = aliased_pairs(produced, new_inputs)
        if aliased and not job.handed.reference_aliases:
            out_i, in_i = aliased[0]
            raise Decided(
                Outcome(Verdict.RUNTIME_ERROR, f"anti-hacking: output {out_i} shares memory with input {in_i}")
            )
        outputs.append(_on(produced, "cpu"))
    return outputs


def _profile_candidate(
    candidate: Any, inputs: list[Any], extension_kernels: list[str], device: Any
) -> tuple[dict[str, int], float]:
    """Kernel launch counts during one candidate forward, and the candidate kernels' time share."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call_forward(candidate, _on(clone_values(inputs), device), "candidate", settle=_synchronize)
    events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    names = [e.name for e in events]
    custom, library = classify_kernels(names, extension_kernels)
    launches: dict[str, int] = {}
    for name in names:
        short = name.split("(")[0].removeprefix("void ").strip()
        launches[short] = launches.get(short, 0) + 1
    if not custom:
        shown = ", ".join(sorted({n.split("(")[0] for n in library}))[:300] or "none"
        raise Decided(
            Outcome(
                Verdict.RUNTIME_ERROR,
                f"anti-hacking: no kernel of the candidate ran during forward (kernels seen: {shown})",
                launches=launches,
            )
        )
    total = sum(e.device_time_total for e in events) or 1.0
    share = sum(e.device_time_total for e in events if e.name in set(custom)) / total
    return launches, share


def memory_fraction(cap_mb: int, total_bytes: int) -> float:
    """Share of a device of ``total_bytes`` that ``cap_mb`` MiB is, at most 1 (torch's per-process cap)."""
    return min(1.0, cap_mb * (1 << 20) / total_bytes)


def candidate_side(job: GpuJob, workdir: Path, device: Any, timings: dict[str, float]) -> Outcome:
    """Build and run the candidate on the handed inputs, write its outputs, profile and time it."""
    import torch

    cap_mb = job.gpu_memory_mb
    if device.type == "cuda":  # the unit tests run this side on the CPU
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(memory_fraction(cap_mb, total), device)
    try:
        return _candidate_run(job, workdir, device, timings)
    except torch.OutOfMemoryError:
        return Outcome(Verdict.RUNTIME_ERROR, f"the candidate needs more than the device memory cap of {cap_mb} MiB")


def _candidate_run(job: GpuJob, workdir: Path, device: Any, timings: dict[str, float]) -> Outcome:
    import torch

    _set_tf32_off()
    tf32 = _tf32_state()
    monitor = FallbackMonitor()
    inputs = load_values((workdir / INPUTS_FILE).read_bytes())
    clock = time.perf_counter()
    build = _build_candidate(job, workdir, monitor, inputs, device)
    timings["build"] = time.perf_counter() - clock
    with torch.no_grad():
        torch.manual_seed(INIT_SEED)
        candidate = build()
        _check_tf32(tf32)
        clock = time.perf_counter()
        outputs = _run_trials(candidate, inputs["trials"], job, device, monitor, tf32)
        timings["correctness"] = time.perf_counter() - clock
        save_values(workdir / OUTPUTS_FILE, {"trials": outputs})
        launches, share = _profile_candidate(candidate, inputs["trials"][0], job.kernel_names, device)
        clock = time.perf_counter()
        stats = _timed(candidate, inputs["trials"], job, device)
        _check_tf32(tf32)
        timings["timing"] = time.perf_counter() - clock
    return Outcome(
        Verdict.PASS,
        runtime_ms=stats.mean,
        launches=launches,
        log=json.dumps({"candidate_ms": stats.model_dump(), "custom_time_share": share}),
    )


def side_main(side: str, job: GpuJob, workdir: Path, timings: dict[str, float]) -> Outcome:
    """One side of the tier-3 check; ``unsupported`` where this process sees no GPU."""
    import torch

    if not torch.cuda.is_available():
        return Outcome(Verdict.UNSUPPORTED, "no CUDA GPU on this machine", unsupported_feature="gpu")
    run = reference_side if side == "reference" else candidate_side
    return run(job, workdir, torch.device("cuda", torch.cuda.current_device()), timings)


def warm_up() -> None:
    """What the candidate side imports before its files arrive (``run_side --late``)."""
    import safetensors.torch  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401


if __name__ == "__main__":
    run_side(side_main, GpuJob, sys.argv[1:], "GPU", warm_up)
