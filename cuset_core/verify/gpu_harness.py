"""Tier 3 harness: the KernelBench protocol on a real GPU, run inside the sandbox.

``python -m cuset_core.verify.gpu_harness JOB_JSON`` reads a job written by
``cuset_core.verify.gpu`` (problem file, candidate file, settings), builds the candidate with
the real ``torch.utils.cpp_extension`` (``load_inline`` from the candidate's own code, or
``load`` for a ``.cu`` file), and writes ``result.json`` next to the job: the fields of a
``VerifyResult`` that tier 3 decides.

Protocol, in order (the first failure decides):
1. TF32 off on both sides (``matmul.allow_tf32``, ``cudnn.allow_tf32``, precision "highest");
   a candidate that changes them is rejected.
2. Build. An extension that fails to build or load is ``compile_error``.
3. Weights: the reference and the candidate are built after the same ``torch.manual_seed``.
4. Correctness, one trial per seed: fresh inputs from ``get_inputs()`` under that seed, each
   side gets its own copy; shapes, then ``allclose(atol, rtol)``; a candidate output that
   shares storage with an input (when the reference's does not) is rejected, and so is one
   that stays the same when the inputs (and the reference output) change.
5. Profiler: during one candidate forward at least one CUDA kernel that the candidate
   defines must run; only library kernels (aten, cuBLAS, cuDNN, CUTLASS...) is a rejection.
6. Timing: warmup, then ``timing_trials`` calls per side, each on cloned inputs (rotating
   between two input sets so a cached result is wrong), an L2 flush (writing a buffer twice
   the L2 size) before each, CUDA events around the call with ``torch.cuda.synchronize()``
   before the end event. Speedup = reference mean / candidate mean.

Anti-hacking rejections use the verdict ``runtime_error`` with a reason starting
"anti-hacking:". The harness runs candidate code in its own process, so it guards against
accidental and lazy hacks, not against a candidate that forges this process's result file.
"""

from __future__ import annotations

import importlib.util
import json
import re
import statistics
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any, Callable

from cuset_core.verify.protocol import (
    INIT_SEED,
    INPUT_SEED_BASE,
    Decided,
    Outcome,
    candidate_factory,
    compare_outputs,
    flatten_outputs,
    read_job,
    tail,
    write_outcome,
)

WARMUP_CALLS = 5

_LIBRARY_KERNEL = re.compile(
    r"at::|\bcublas|cutlass|cudnn|xmma|\bgemm|gemv|\bcub::|triton_|\bnvjet|"
    r"^(ampere|volta|turing|hopper|sm\d+)_|elementwise_kernel|reduce_kernel|"
    r"^Memcpy|^Memset|^void (splitKreduce|gemmk1|dot_kernel|scal_kernel)",
    re.IGNORECASE,
)
_GLOBAL_KERNEL = re.compile(r"__global__\s+[\w:<>\s*]*?\b(\w+)\s*\(", re.S)
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")


# ---------------------------------------------------------------- pure checks (unit-tested)


def kernel_names(cuda_source: str) -> list[str]:
    """Names of the ``__global__`` functions defined in ``cuda_source``, in order."""
    names: list[str] = []
    for match in _GLOBAL_KERNEL.finditer(_LAUNCH_BOUNDS.sub(" ", cuda_source)):
        if match.group(1) not in names:
            names.append(match.group(1))
    return names


def classify_kernels(event_names: list[str], extension_kernels: list[str]) -> tuple[list[str], list[str]]:
    """Split profiled CUDA kernel names into (candidate's kernels, library kernels).

    A kernel is the candidate's when one of ``extension_kernels`` appears in it as a word;
    when the candidate's kernel names are unknown (macro-generated), any kernel that does not
    look like a library kernel counts.
    """
    custom, library = [], []
    for name in event_names:
        if extension_kernels:
            mine = any(re.search(rf"\b{re.escape(k)}\b", name) for k in extension_kernels)
        else:
            mine = _LIBRARY_KERNEL.search(name) is None
        (custom if mine else library).append(name)
    return custom, library


def timing_stats(samples_ms: list[float]) -> dict[str, float]:
    """Mean, median, std (population), min, max and count of per-call times in milliseconds."""
    if not samples_ms:
        raise ValueError("timing_stats needs at least one sample")
    return {
        "mean": statistics.fmean(samples_ms),
        "median": statistics.median(samples_ms),
        "std": statistics.pstdev(samples_ms),
        "min": min(samples_ms),
        "max": max(samples_ms),
        "n": float(len(samples_ms)),
    }


def storage_span(tensor: Any) -> tuple[int, int] | None:
    """Byte range ``[start, end)`` of the storage behind ``tensor``; None when it is empty."""
    storage = tensor.untyped_storage()
    if storage.nbytes() == 0:
        return None
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def aliased_pairs(outputs: list[Any], inputs: list[Any]) -> list[tuple[int, int]]:
    """``(output index, input index)`` pairs whose storages overlap (tensors only)."""
    import torch

    pairs = []
    for i, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor) or (out_span := storage_span(out)) is None:
            continue
        for j, inp in enumerate(inputs):
            if not isinstance(inp, torch.Tensor) or (in_span := storage_span(inp)) is None:
                continue
            if out_span[0] < in_span[1] and in_span[0] < out_span[1]:
                pairs.append((i, j))
    return pairs


def looks_cached(ref_first: list[Any], ref_second: list[Any], new_first: list[Any], new_second: list[Any]) -> bool:
    """True when the reference output changed between two input sets but the candidate's did not."""
    import torch

    def same(a: list[Any], b: list[Any]) -> bool:
        return len(a) == len(b) and all(
            torch.equal(x, y) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else x == y
            for x, y in zip(a, b)
        )

    return not same(ref_first, ref_second) and same(new_first, new_second)


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
        raise Decided(Outcome("runtime_error", f"anti-hacking: the candidate changed TF32 settings to {changed}"))


def _load_module(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _is_build_failure(exc: BaseException) -> bool:
    text = str(exc)
    return "Error building extension" in text or "undefined symbol" in text or isinstance(exc, ImportError)


def _build_candidate(job: dict, reference_module: types.ModuleType, workdir: Path, device: Any) -> Callable[[], Any]:
    """Compile the candidate; return a factory that builds the candidate module on ``device`` (seed it first)."""
    from torch.utils.cpp_extension import load

    candidate_path = workdir / job["candidate"]
    init_inputs = reference_module.get_init_inputs()
    try:
        if job["kind"] == "cu":
            built = load(name="cuset_cu_candidate", sources=[str(candidate_path)],
                         extra_cuda_cflags=["-O3"], verbose=False)
        else:
            built = _load_module(candidate_path, "cuset_candidate")
    except Exception as exc:  # noqa: BLE001 - any failure to build or import decides the verdict
        verdict = "compile_error" if _is_build_failure(exc) else "runtime_error"
        raise Decided(Outcome(verdict, f"building the candidate failed: {str(exc).splitlines()[0][:200]}",
                              log=tail(str(exc) or traceback.format_exc()))) from exc
    return candidate_factory(job["kind"], reference_module, built, init_inputs, candidate_path.read_text(), device)


def _inputs(reference_module: types.ModuleType, seed: int, device: Any) -> list[Any]:
    import torch

    torch.manual_seed(seed)
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in reference_module.get_inputs()]


def _clone(values: list[Any]) -> list[Any]:
    import torch

    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def _call(model: Any, inputs: list[Any], what: str) -> list[Any]:
    import torch

    try:
        output = model(*inputs)
        torch.cuda.synchronize()
    except Decided:
        raise
    except Exception as exc:  # noqa: BLE001 - a crash of either side decides the verdict
        message = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise Decided(Outcome("runtime_error", f"{what} forward failed: {message}",
                              log=tail(traceback.format_exc()))) from exc
    return flatten_outputs(output)


def _check_correctness(reference: Any, candidate: Any, module: types.ModuleType, job: dict, device: Any) -> Outcome:
    tf32 = _tf32_state()
    outcome = Outcome("pass")
    previous: tuple[list[Any], list[Any]] | None = None  # last trial's (reference, candidate) outputs
    for trial in range(job["seeds"]):
        inputs = _inputs(module, INPUT_SEED_BASE + trial, device)
        ref_inputs, new_inputs = _clone(inputs), _clone(inputs)
        ref_out = _call(reference, ref_inputs, "reference")
        new_out = _call(candidate, new_inputs, "candidate")
        _check_tf32(tf32)
        ref_alias, new_alias = aliased_pairs(ref_out, ref_inputs), aliased_pairs(new_out, new_inputs)
        if new_alias and not ref_alias:
            out_i, in_i = new_alias[0]
            raise Decided(Outcome("runtime_error", f"anti-hacking: output {out_i} shares memory with input {in_i}"))
        if previous is not None and looks_cached(previous[0], ref_out, previous[1], new_out):
            raise Decided(Outcome("runtime_error", "anti-hacking: the output did not change when the inputs did"))
        compared = compare_outputs(ref_out, new_out, job["atol"], job["rtol"])
        if compared.verdict != "pass":
            compared.trials = trial + 1
            compared.reason = f"trial {trial + 1} (seed {INPUT_SEED_BASE + trial}): {compared.reason}"
            raise Decided(compared)
        previous = (_clone(ref_out), _clone(new_out))
        outcome.max_abs_diff = max(outcome.max_abs_diff or 0.0, compared.max_abs_diff or 0.0)
        outcome.mean_abs_diff = max(outcome.mean_abs_diff or 0.0, compared.mean_abs_diff or 0.0)
        outcome.trials = trial + 1
    return outcome


def _profile_candidate(
    candidate: Any, module: types.ModuleType, extension_kernels: list[str], device: Any
) -> tuple[dict[str, int], float]:
    """Kernel launch counts during one candidate forward, and the candidate kernels' time share."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    inputs = _inputs(module, INPUT_SEED_BASE, device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _call(candidate, inputs, "candidate")
    events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    names = [e.name for e in events]
    custom, library = classify_kernels(names, extension_kernels)
    launches: dict[str, int] = {}
    for name in names:
        short = name.split("(")[0].removeprefix("void ").strip()
        launches[short] = launches.get(short, 0) + 1
    if not custom:
        shown = ", ".join(sorted({n.split("(")[0] for n in library}))[:300] or "none"
        raise Decided(Outcome("runtime_error",
                              f"anti-hacking: no kernel of the candidate ran during forward (kernels seen: {shown})",
                              launches=launches))
    total = sum(e.device_time_total for e in events) or 1.0
    share = sum(e.device_time_total for e in events if e.name in set(custom)) / total
    return launches, share


def _l2_flusher(device: Any) -> Callable[[], None]:
    import torch

    properties = torch.cuda.get_device_properties(device)
    l2_bytes = getattr(properties, "L2_cache_size", 0) or (128 << 20)
    buffer = torch.empty(2 * l2_bytes // 4 + 1, dtype=torch.float32, device=device)
    return lambda: buffer.fill_(1.0)


def _time_calls(model: Any, input_sets: list[list[Any]], trials: int, flush: Callable[[], None]) -> list[float]:
    """Per-call milliseconds over ``trials`` timed calls after warmup (CUDA events)."""
    import torch

    for index in range(WARMUP_CALLS):
        model(*_clone(input_sets[index % len(input_sets)]))
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for index in range(trials):
        inputs = _clone(input_sets[index % len(input_sets)])
        flush()
        torch.cuda.synchronize()
        start.record()
        model(*inputs)
        torch.cuda.synchronize()  # work on any stream counts before the end stamp
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return samples


def run_protocol(job: dict, workdir: Path, device: Any) -> Outcome:
    """Run the whole tier-3 protocol for one job on ``device``; the first failure raises ``Decided``."""
    import torch

    _set_tf32_off()
    tf32 = _tf32_state()
    timings: dict[str, float] = {}
    reference_module = _load_module(workdir / job["problem"], "cuset_reference")

    clock = time.perf_counter()
    build = _build_candidate(job, reference_module, workdir, device)
    timings["build"] = time.perf_counter() - clock

    init_inputs = reference_module.get_init_inputs()
    with torch.no_grad():
        torch.manual_seed(INIT_SEED)
        reference = reference_module.Model(*init_inputs).to(device)
        torch.manual_seed(INIT_SEED)
        candidate = build()
        _check_tf32(tf32)

        clock = time.perf_counter()
        outcome = _check_correctness(reference, candidate, reference_module, job, device)
        timings["correctness"] = time.perf_counter() - clock

        launches, share = _profile_candidate(candidate, reference_module, job["kernel_names"], device)
        outcome.launches = launches

        clock = time.perf_counter()
        input_sets = [_inputs(reference_module, INPUT_SEED_BASE + i, device) for i in range(2)]
        flush = _l2_flusher(device)
        new_ms = timing_stats(_time_calls(candidate, input_sets, job["timing_trials"], flush))
        _check_tf32(tf32)
        ref_ms = timing_stats(_time_calls(reference, input_sets, job["timing_trials"], flush))
        timings["timing"] = time.perf_counter() - clock

    outcome.runtime_ms, outcome.reference_ms = new_ms["mean"], ref_ms["mean"]
    outcome.speedup = ref_ms["mean"] / new_ms["mean"] if new_ms["mean"] > 0 else None
    outcome.timings_s = timings
    outcome.reason = (
        f"{outcome.trials} trials within tolerance; {new_ms['mean']:.4f} ms vs eager {ref_ms['mean']:.4f} ms "
        f"(speedup {outcome.speedup:.2f}x); candidate kernels {share:.0%} of GPU time"
    )
    outcome.log = json.dumps({"candidate_ms": new_ms, "reference_ms": ref_ms, "custom_time_share": share})
    return outcome


def main(argv: list[str]) -> int:
    """Entry point: ``gpu_harness JOB_JSON``; always writes ``result.json`` unless killed."""
    job, workdir = read_job(argv)
    import torch

    try:
        if torch.cuda.is_available():
            outcome = run_protocol(job, workdir, torch.device("cuda"))
        else:
            outcome = Outcome("unsupported", "no CUDA GPU on this machine", unsupported_feature="gpu")
    except Decided as decided:
        outcome = decided.outcome
    except Exception:  # noqa: BLE001 - report, never crash without a result
        outcome = Outcome("runtime_error", "the GPU harness failed", log=tail(traceback.format_exc()))
    write_outcome(workdir, job, outcome)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
