"""Tier 2 harness: the two sandboxed sides of a CPU-runtime check (see ``judge``).

``python -m cuset_core.verify.cpu.harness SIDE JOB_JSON`` with SIDE one of:

- ``reference``: shrinks the problem's sizes (module-level int constants, measured on the meta
  device) until the inputs plus weights, and the outputs, each hold at most ``max_elements``
  elements; when the reduced problem breaks the reference it runs the original sizes if they
  fit (``sizes.original_fits``), else reports ``unsupported``. Then one trial per seed: inputs
  drawn under that seed (``input_seed + trial``, a seed the judge drew), every second trial's
  floating-point inputs scaled while the outputs stay finite (``harness_side.trial_outputs``),
  weights under ``INIT_SEED``; writes ``inputs.safetensors`` and ``reference.safetensors``.
- ``candidate``: builds the candidate (``load_inline``/``load`` compile with g++ and the
  runtime; a failed build is ``compile_error`` even when the candidate catches it), builds
  ``ModelNew`` under ``INIT_SEED`` and runs every trial's inputs, each under a different fiber
  schedule (forward, reverse, odd threads first), while a ``FallbackMonitor`` checks that the
  outputs come from its kernels; writes ``outputs.safetensors`` and the launch counts. Then it
  runs trial 1 once more with the kernels off (launches are checked and counted but run no
  block; the switch is in the trusted runtime library, not the environment) and writes what
  that gives to ``kernels_off.safetensors``: the judge's check that the kernels did the work
  (``judge.kernels_did_the_work``).

CUDA is mapped to the CPU on both sides: ``device="cuda"`` arguments, ``.to("cuda")`` and
``.cuda()`` give CPU tensors.
"""

from __future__ import annotations

import ast
import ctypes
import importlib.machinery
import importlib.util
import re
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cuset_core.verify.cpu.build import (
    CU_EXTENSION,
    BuildError,
    Toolchain,
    extension_module_name,
    launch_counts,
    launch_failure,
    set_kernel_resources,
    unit_digest,
)
from cuset_core.verify.execution.contracts import (
    INIT_SEED,
    INPUTS_FILE,
    KERNELS_OFF_FILE,
    OUTPUTS_FILE,
    REFERENCE_FILE,
    SECOND_KERNELS_OFF_FILE,
    SECOND_OUTPUTS_FILE,
    SECOND_REPORT_FILE,
    BuildDetails,
    CandidateJob,
    CpuJob,
    Decided,
    Outcome,
    PrebuiltLibrary,
    ReferenceDetails,
    clip,
    named_sizes,
    tail,
    trial_seeds,
    wide_trial,
)
from cuset_core.verify.execution.disguise import (
    CANDIDATE_MODULE,
    CUDA_VERSION,
    CUDNN_VERSION,
    GPU_NAME,
    as_if,
    plain_command_line,
)
from cuset_core.verify.execution.fallback import FallbackMonitor
from cuset_core.verify.execution.harness_side import (
    aliased_pairs,
    call_forward,
    candidate_factory,
    changed_inputs,
    clone_values,
    first_line,
    flatten_outputs,
    run_side,
    trial_outputs,
    write_report,
)
from cuset_core.verify.execution.transfer import load_values, save_values
from cuset_core.verify.result import SizesRun, Verdict

# How many times the second size's element budget may halve to find sizes other than the first's.
SECOND_SIZE_HALVINGS = 4
SCHEDULES = ("ascending thread order", "descending thread order", "odd threads first")
_MISSING_HEADER = re.compile(r"fatal error: ([\w./]+): No such file or directory")
_FACTORIES = (
    "randn",
    "rand",
    "randint",
    "zeros",
    "ones",
    "empty",
    "full",
    "arange",
    "linspace",
    "eye",
    "tensor",
    "randperm",
    "normal",
    "as_tensor",
)


# ---------------------------------------------------------------- CUDA -> CPU for Python


def _is_cuda(value: Any) -> bool:
    import torch

    if isinstance(value, str):
        return value.startswith("cuda")
    return isinstance(value, torch.device) and value.type == "cuda"


def _retarget(args: tuple, kwargs: dict, device: str) -> tuple[tuple, dict]:
    """Replace CUDA devices among ``args``/``kwargs`` by ``device``."""
    args = tuple(device if _is_cuda(a) else a for a in args)
    if _is_cuda(kwargs.get("device")):
        kwargs = {**kwargs, "device": device}
    return args, kwargs


def device_mode(target: str):
    """A torch function mode that runs CUDA requests on ``target`` ("cpu" or "meta").

    With "meta" every factory call lands on the meta device too (nothing is allocated), which
    is how problem sizes are measured.
    """
    import torch
    from torch.overrides import TorchFunctionMode

    factories = {getattr(torch, name) for name in _FACTORIES}

    class DeviceMode(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            args, kwargs = _retarget(tuple(args), dict(kwargs or {}), target)
            if target == "meta" and func in factories:
                kwargs["device"] = "meta"
            return func(*args, **kwargs)

    return DeviceMode()


# What torch.cuda.get_device_properties says on tier 2: the device the CPU runtime models, as its
# cudaGetDeviceProperties does (runtime/cuset_cuda_types.h), so Python sizing a grid by it sees the same.
DEVICE_PROPERTIES = types.SimpleNamespace(
    name=GPU_NAME,
    major=9,
    minor=0,
    total_memory=80 << 30,
    multi_processor_count=132,
    max_threads_per_multi_processor=2048,
    max_threads_per_block=1024,
    warp_size=32,
    regs_per_multiprocessor=65536,
    shared_memory_per_block=48 * 1024,
    shared_memory_per_block_optin=227 * 1024,
    shared_memory_per_multiprocessor=228 * 1024,
    L2_cache_size=50 * 1024 * 1024,
)


def map_cuda_to_cpu(move_tensors: bool = True) -> None:
    """Patch torch so CUDA-only calls of problem and candidate code work on the CPU, and so that
    Python asking whether CUDA is there gets a GPU's answer: a candidate that branches on
    ``torch.cuda.is_available()`` is judged on the branch a GPU takes (never on a CPU fallback).
    ``move_tensors`` False leaves ``.cuda()`` alone: behind the device boundary it moves data."""
    import torch

    if move_tensors:
        # Replacing these methods is the point (mypy's method-assign): on the CPU they return self.
        torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
        torch.nn.Module.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    answers: dict[str, Callable[..., Any]] = {
        "synchronize": lambda *args, **kwargs: None,
        "current_device": lambda: 0,
        "set_device": lambda *args, **kwargs: None,
        "empty_cache": lambda: None,
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "get_device_properties": lambda *args, **kwargs: DEVICE_PROPERTIES,
        "get_device_capability": lambda *args, **kwargs: (DEVICE_PROPERTIES.major, DEVICE_PROPERTIES.minor),
        "get_device_name": lambda *args, **kwargs: DEVICE_PROPERTIES.name,
    }
    for name, answer in answers.items():  # named as torch's own, so that nothing tells them apart
        setattr(torch.cuda, name, as_if(answer, "torch.cuda", name))


def versions_say_cuda() -> None:
    """A CUDA build's versions on the candidate side: a CPU wheel's ``torch.version.cuda`` is None,
    which would tell a candidate where it runs. Not on the reference side, whose torch must take
    its CPU paths."""
    import torch

    torch.version.cuda = CUDA_VERSION
    torch.backends.cudnn.is_available = as_if(lambda: True, "torch.backends.cudnn", "is_available")
    torch.backends.cudnn.version = as_if(lambda: CUDNN_VERSION, "torch.backends.cudnn", "version")


def tensors_say_cuda() -> None:
    """Make ``tensor.is_cuda`` True in Python on the candidate side, where every tensor stands for
    device memory: ``assert x.is_cuda`` passes and ``kernel(x) if x.is_cuda else torch_op(x)`` takes
    the kernel, as on a GPU. Not on the reference side: torch's own Python code reads ``is_cuda`` to
    pick CUDA-only paths, and the reference must run as torch runs it on the CPU."""
    import torch

    torch.Tensor.is_cuda = property(lambda self: self.device.type in ("cpu", "cuda"))  # type: ignore[assignment]


# ---------------------------------------------------------------- extension builds


class Builder:
    """Stands in for ``torch.utils.cpp_extension.load_inline``/``load`` inside the harness."""

    def __init__(
        self,
        workdir: Path,
        preludes: list[Path],
        timings: dict[str, float],
        chain,
        prebuilt: dict,
        monitor: FallbackMonitor | None,
        on_load: Callable[[Path], None] = lambda _library: None,
        device_boundary: bool = False,
    ):
        self.workdir = workdir
        self.monitor = monitor  # every extension's functions count as kernel calls
        self.on_load = on_load  # told of every library the candidate loads
        self.device_boundary = device_boundary  # see rewrite.rewrite_source
        self.preludes = preludes
        self.chain = chain
        self.prebuilt = prebuilt  # (module name, translation unit) -> Future of the library path
        self.libraries: list[Path] = []
        # What load_inline/load returned, by what was asked: the candidate's module runs again at
        # the second size and asks again; torch too hands back the extension it built before.
        self.loaded: dict[tuple[str, str, str, tuple[str, ...] | None], types.ModuleType] = {}
        self.built_with: dict[str, str] = {}  # module name -> the prelude that built it
        self.failure: Outcome | None = None
        self.timings = timings  # "build": seconds waiting for g++, summed over extensions

    def build(self, name: str, cuda: str, cpp: str, functions: list[str] | None) -> types.ModuleType:
        from cuset_core.verify.cpu.build import built_with, compile_extension, translation_unit
        from cuset_core.verify.cpu.rewrite import unsupported_feature

        asked = (name, cuda, cpp, None if functions is None else tuple(functions))
        if asked in self.loaded:
            return self.loaded[asked]
        feature = unsupported_feature(cuda) or unsupported_feature(cpp, cuda=False)
        if feature:
            self.failure = Outcome(Verdict.UNSUPPORTED, f"uses {feature}", log=feature, unsupported_feature=feature)
            raise Decided(self.failure)
        module_name = extension_module_name(cuda, cpp, functions)
        clock = time.perf_counter()
        unit = translation_unit(module_name, cuda, cpp, functions, self.device_boundary)
        try:
            started = self.prebuilt.get((module_name, unit))
            if started is not None:
                library = started.result()
            else:
                library = compile_extension(module_name, unit, self.workdir, self.preludes, self.chain)
        except BuildError as exc:
            missing = _MISSING_HEADER.search(str(exc))
            if missing:  # a CUDA header the runtime has no stand-in for (a library, PTX helpers...)
                header = f"header <{missing.group(1)}>"
                self.failure = Outcome(
                    Verdict.UNSUPPORTED, f"uses {header}", log=tail(str(exc)), unsupported_feature=header
                )
            else:
                self.failure = Outcome(
                    Verdict.COMPILE_ERROR, f"g++ rejected the extension: {_first_error(str(exc))}", log=tail(str(exc))
                )
            raise
        finally:
            self.timings["build"] = self.timings.get("build", 0.0) + time.perf_counter() - clock
        self.libraries.append(library)
        loader = importlib.machinery.ExtensionFileLoader(module_name, str(library))
        spec = importlib.util.spec_from_file_location(module_name, library, loader=loader)
        if spec is None:
            raise ImportError(f"no module spec for {library}")
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        try:
            self.built_with[module_name] = built_with(library)
        except (OSError, AttributeError, UnicodeDecodeError):  # a library from elsewhere, or a candidate's lie
            pass
        self.on_load(library)
        self.loaded[asked] = self.monitor.wrap_extension(module) if self.monitor is not None else module
        return self.loaded[asked]

    def load_inline(self, name, cpp_sources, cuda_sources=None, functions=None, **_ignored):
        """``load_inline``'s signature; compiler flags and include paths are ignored."""
        if isinstance(functions, str):
            functions = [functions]
        elif isinstance(functions, dict):
            functions = list(functions)
        return self.build(name, _joined(cuda_sources), _joined(cpp_sources), functions)

    def load(self, name, sources, **_ignored):
        """``load``'s signature: the sources are files; ``.cu``/``.cpp`` are compiled alike."""
        texts = [Path(source).read_text() for source in ([sources] if isinstance(sources, str) else sources)]
        return self.build(name, "\n".join(texts), "", None)

    def launches(self) -> dict[str, int]:
        """Kernel launches counted by the runtime of every built extension."""
        return launch_counts(ctypes.CDLL(str(library)) for library in self.libraries)

    def launch_failure(self) -> str:
        """Why a launch failed, when no ``cudaGetLastError()`` of the candidate consumed it; or ""."""
        return launch_failure(ctypes.CDLL(str(library)) for library in self.libraries)


def _joined(sources: Any) -> str:
    if sources is None:
        return ""
    return sources if isinstance(sources, str) else "\n".join(sources)


def _first_error(log: str) -> str:
    for line in log.splitlines():
        if "error" in line:
            return line.strip()[:200]
    return (log.strip().splitlines() or ["no output"])[0][:200]


# ---------------------------------------------------------------- modules and sizes


def load_source(source: str, name: str, overrides: dict[str, int], filename: str) -> types.ModuleType:
    """Execute ``source`` as module ``name`` with its int constants overridden."""
    from cuset_core.verify.cpu.sizes import with_constants

    tree = with_constants(ast.parse(source, filename), overrides)
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(tree, filename, "exec"), module.__dict__)  # noqa: S102 - sandboxed by design
    return module


def measured_elements(problem_source: str, overrides: dict[str, int]) -> int:
    """Elements the problem holds, measured on the meta device: its inputs plus weights, or its
    outputs, whichever is larger (an elementwise op counts once, an outer product by its output)."""
    return measured_sizes(problem_source, overrides)[0]


def measured_sizes(problem_source: str, overrides: dict[str, int]) -> tuple[int, int]:
    """The problem's elements (as :func:`measured_elements` counts them) and those of its largest
    single tensor (input, weight or output), measured on the meta device."""
    import torch

    with _dynamo_unasked(), device_mode("meta"):
        module = load_source(problem_source, "cuset_measure", overrides, "problem.py")
        inputs = module.get_inputs()
        model = module.Model(*module.get_init_inputs())
        try:
            outputs = flatten_outputs(model(*inputs))
        except Exception:  # noqa: BLE001 - an op without a meta kernel: count inputs and weights only
            outputs = []
    held = [*inputs, *model.parameters(), *model.buffers()]
    counts = [[t.numel() for t in tensors if isinstance(t, torch.Tensor)] for tensors in (held, outputs)]
    return max(sum(numbers) for numbers in counts), max([0, *counts[0], *counts[1]])


@contextmanager
def _dynamo_unasked() -> Iterator[None]:
    """No ``torch._dynamo`` import for the meta device's sake while sizes are measured.

    Many ops run on the meta device through torch's Python references, which import
    ``torch._dynamo`` on their first call only to mark themselves as not to be traced
    (``torch._compile._disable_dynamo``): 1.1 of the 1.6 CPU seconds of planning the sizes of 12
    demo problems. Nothing traces in this process, so while sizes are measured a stand-in module
    answers that import and marks nothing; the real module loads if anything asks for it later.
    """
    import torch

    if "torch._dynamo" in sys.modules:
        yield
        return
    stand_in = types.ModuleType("torch._dynamo")
    stand_in.disable = lambda fn=None, recursive=True, **_: fn  # type: ignore[attr-defined]
    sys.modules["torch._dynamo"], torch._dynamo = stand_in, stand_in
    try:
        yield
    finally:
        if sys.modules.get("torch._dynamo") is stand_in:
            del sys.modules["torch._dynamo"]
        if getattr(torch, "_dynamo", None) is stand_in:
            del torch._dynamo


def size_overrides(problem_source: str, max_elements: int) -> dict[str, int]:
    """Constant overrides that shrink the problem; none when sizes cannot be measured."""
    from cuset_core.verify.cpu.sizes import int_constants, plan_reduction

    constants = int_constants(ast.parse(problem_source))
    try:
        return plan_reduction(constants, lambda o: measured_elements(problem_source, o), max_elements)
    except Exception:  # noqa: BLE001 - a problem that cannot run on meta keeps its sizes
        return {}


def candidate_overrides(
    candidate_source: str, problem_constants: dict[str, int], overrides: dict[str, int]
) -> dict[str, int]:
    """The overrides that also apply to the candidate: same name, same original value."""
    from cuset_core.verify.cpu.sizes import int_constants

    own = int_constants(ast.parse(candidate_source))
    return {name: value for name, value in overrides.items() if own.get(name) == problem_constants.get(name)}


# ---------------------------------------------------------------- the reference side


def run_reference(problem_source: str, overrides: dict[str, int], kind: str, seeds: list[int]) -> dict[str, Any]:
    """The reference at the given sizes: the candidate's inputs (``init``, ``trials``, and for a
    ``.cu`` candidate the reference's ``layout`` and ``weights``), the expected ``outputs`` and
    the ``wide_trials`` (0-based) whose inputs were scaled (``harness_side.trial_outputs``).
    Any failure raises ``Decided`` (``internal_error``: the problem, not the candidate)."""
    import dataclasses

    import torch

    from cuset_core.verify.execution.binding import reference_layout

    def failed(what: str, exc: Exception) -> Decided:
        return Decided(
            Outcome(
                Verdict.INTERNAL_ERROR,
                f"the reference {what} failed: {first_line(exc)}",
                log=tail(traceback.format_exc()),
            )
        )

    data: dict[str, Any] = {"trials": [], "outputs": [], "wide_trials": []}
    # Whether the reference itself returns views of its inputs or writes into them: the candidate
    # may then do the same (tier 3's rule); else either is an anti-hacking failure there.
    shares = {"aliases": False, "mutates": False}

    def reference_forward(values: list[Any]) -> list[Any]:
        given = clone_values(values)
        produced = call_forward(model, given, "reference", Verdict.INTERNAL_ERROR)
        shares["aliases"] = shares["aliases"] or bool(aliased_pairs(produced, given))
        shares["mutates"] = shares["mutates"] or bool(changed_inputs(values, given))
        return produced

    with device_mode("cpu"), torch.no_grad():
        try:
            problem = load_source(problem_source, "cuset_reference", overrides, "problem.py")
            data["init"] = list(problem.get_init_inputs())
            torch.manual_seed(INIT_SEED)
            model = problem.Model(*data["init"])
        except Exception as exc:  # noqa: BLE001 - the problem's own code decides nothing about the candidate
            raise failed("construction", exc) from exc
        if kind == "cu":
            data["layout"] = dataclasses.asdict(reference_layout(model))
            data["weights"] = {
                name: t.detach().clone() for name, t in [*model.named_parameters(), *model.named_buffers()]
            }
        for trial, seed in enumerate(seeds):  # one trial each
            torch.manual_seed(seed)
            try:
                drawn = list(problem.get_inputs())
            except Exception as exc:  # noqa: BLE001
                raise failed("get_inputs()", exc) from exc
            inputs, outputs, wide = trial_outputs(drawn, reference_forward, wide_trial(trial))
            data["trials"].append(inputs)
            data["outputs"].append(outputs)
            if wide:
                data["wide_trials"].append(trial)
    data.update(shares)
    return data


def reference_side(job: CpuJob, workdir: Path, timings: dict[str, float]) -> Outcome:
    """Plan the sizes, run the reference, write the candidate's inputs and the expected outputs."""
    import torch

    from cuset_core.verify.cpu.sizes import int_constants, original_fits

    clock = time.perf_counter()
    torch.set_num_threads(1)
    map_cuda_to_cpu()
    problem_source = (workdir / "problem.py").read_text()
    constants = int_constants(ast.parse(problem_source))
    overrides = size_overrides(problem_source, job.max_elements) if job.reduce_sizes else {}
    if job.reduce_sizes and (too_large := _too_large(problem_source, overrides, job.max_elements)):
        raise Decided(too_large)
    original, largest = _safe_sizes(problem_source) if overrides else (None, None)
    fits = not overrides or original_fits(original, job.max_elements)
    try:
        data = run_reference(problem_source, overrides, job.kind, trial_seeds(job))
    except Decided as decided:
        if not overrides:
            raise
        if not fits:
            raise Decided(
                Outcome(
                    Verdict.UNSUPPORTED,
                    "the reduced problem breaks the reference "
                    f"({decided.outcome.reason}) and its original sizes are too large for tier 2",
                    log=decided.outcome.log,
                    unsupported_feature="original problem sizes",
                )
            ) from None
        note = f"the reduced problem broke the reference ({decided.outcome.reason}); original sizes used"
        overrides, data = {}, run_reference(problem_source, {}, job.kind, trial_seeds(job))
    else:
        shrunk = ", ".join(f"{name}={constants[name]}->{value}" for name, value in overrides.items())
        note = f"sizes reduced: {shrunk}" if shrunk else ""
    outputs, wide_trials = data.pop("outputs"), data.pop("wide_trials")
    aliases, mutates = data.pop("aliases"), data.pop("mutates")
    second_overrides, second = _second_size(problem_source, overrides, job) if overrides else ({}, None)
    expected: dict[str, Any] = {"trials": outputs}
    second_wide: list[int] = []
    if second is not None:
        expected["second_trials"], second_wide = second.pop("outputs"), second.pop("wide_trials")
        aliases, mutates = aliases or second.pop("aliases"), mutates or second.pop("mutates")
        data["second"] = second
        note += f"; checked again at {named_sizes(second_overrides)}"
    save_values(workdir / INPUTS_FILE, data)
    save_values(workdir / REFERENCE_FILE, expected)
    timings["reference"] = time.perf_counter() - clock
    return Outcome(
        Verdict.PASS,
        details=ReferenceDetails(
            note=note,
            original_fits=fits,
            original_elements=original,  # the judge grows the sandbox's limits for a rerun at them
            original_largest=largest,  # tier 2 refuses indices too narrow for it (cpu.narrow_index_refusal)
            sizes_run=[
                sizes_run(constants, overrides, data["trials"]),
                *([sizes_run(constants, second_overrides, second["trials"])] if second is not None else []),
            ],
            wide_trials=wide_trials,
            second_wide_trials=second_wide,
            candidate_job=CandidateJob(
                overrides=overrides,
                constants=constants,
                second_overrides=second_overrides,
                reference_aliases=aliases,
                reference_mutates=mutates,
            ),
        ),
    )


def sizes_run(constants: dict[str, int], overrides: dict[str, int], trials: list[list[Any]]) -> SizesRun:
    """What a verdict says of trials drawn at ``overrides`` of the problem's ``constants``."""
    shapes = [[list(getattr(value, "shape", ())) for value in inputs] for inputs in trials]
    shrunk = {name: constants[name] for name, value in overrides.items() if value < constants.get(name, value)}
    return SizesRun(sizes={**constants, **overrides}, shrunk=shrunk, input_shapes=shapes)


def _second_size(
    problem_source: str, overrides: dict[str, int], job: CpuJob
) -> tuple[dict[str, int], dict[str, Any] | None]:
    """The second reduction's overrides and its reference data (as :func:`run_reference` returns
    it), drawn under the seeds after the first size's; none when the job asks for no second size,
    the sizes shrink no further, or the smaller problem breaks the reference (the first size's
    verdict then stands alone: the problem's failure is never the candidate's).

    It runs the dimension the first size shrank most at its original value, the others shrunk first
    (down to 1) to fit, where the problem allows (:func:`_whole_size_overrides`): a kernel right only
    up to the reduced size of a dimension fails there. Otherwise the budget halves again while it
    gives the first size's overrides back (a matmul's N=256 holds 2 x 65,536 input elements, within
    half of 2^18 too): a second size that is the first one checks nothing a special case of the
    reduced sizes would fail."""
    if job.second_max_elements is None:
        return {}, None
    seeds = [seed + job.seeds for seed in trial_seeds(job)]
    whole = _whole_size_overrides(problem_source, overrides, job.second_max_elements)
    if whole is not None:
        try:
            return whole, run_reference(problem_source, whole, job.kind, seeds)
        except Decided:
            pass  # the problem breaks with a dimension at 1: the halved budget's sizes instead
    budget, smaller = job.second_max_elements, overrides
    for _ in range(SECOND_SIZE_HALVINGS):
        smaller = size_overrides(problem_source, budget)
        if smaller != overrides:
            break
        budget //= 2
    if not smaller or smaller == overrides:
        return {}, None
    try:
        return smaller, run_reference(problem_source, smaller, job.kind, seeds)
    except Decided:
        return {}, None


def _whole_size_overrides(problem_source: str, overrides: dict[str, int], max_elements: int) -> dict[str, int] | None:
    """The second size that runs the dimension the first shrank most at its original value
    (``sizes.whole_size_plan``); None when there is none or it cannot be measured."""
    from cuset_core.verify.cpu.sizes import int_constants, whole_size_plan

    constants = int_constants(ast.parse(problem_source))
    try:
        return whole_size_plan(constants, overrides, lambda o: measured_elements(problem_source, o), max_elements)
    except Exception:  # noqa: BLE001 - a problem that cannot run on meta keeps the halved budget's sizes
        return None


def _safe_elements(problem_source: str, overrides: dict[str, int] | None = None) -> int | None:
    """Elements of the problem at its original sizes (or with ``overrides``); None when they
    cannot be measured."""
    return _safe_sizes(problem_source, overrides)[0]


def _safe_sizes(problem_source: str, overrides: dict[str, int] | None = None) -> tuple[int | None, int | None]:
    """:func:`measured_sizes` at the original sizes (or with ``overrides``); None for each when they
    cannot be measured."""
    try:
        return measured_sizes(problem_source, overrides or {})
    except Exception:  # noqa: BLE001 - a problem that cannot run on meta: size unknown
        return None, None


def _too_large(problem_source: str, overrides: dict[str, int], max_elements: int) -> Outcome | None:
    """``unsupported`` when the problem, reduced as far as its sizes go, still holds more than
    tier 2 may run (the reference would fill the sandbox's memory or disk for minutes); None when
    it fits or cannot be measured (the sandbox's limits then decide)."""
    from cuset_core.verify.cpu.sizes import ORIGINAL_SIZE_FACTOR, original_fits

    elements = _safe_elements(problem_source, overrides)
    if elements is None or original_fits(elements, max_elements):
        return None
    reduced = ", ".join(f"{name}={value}" for name, value in overrides.items()) or "none of its sizes can shrink"
    return Outcome(
        Verdict.UNSUPPORTED,
        f"the problem holds {elements:,} elements even at reduced sizes ({reduced}), more than the "
        f"{ORIGINAL_SIZE_FACTOR * max_elements:,} tier 2 runs: what it cannot shrink (weights and sizes written "
        "inside the model's code, sizes computed in a function) keeps it large",
        unsupported_feature="problem too large for tier 2",
    )


# ---------------------------------------------------------------- the candidate side


def _import_candidate(
    job: CpuJob,
    workdir: Path,
    builder: Builder,
    inputs: dict[str, Any],
    overrides: dict[str, int],
    device: str | None = None,
) -> Callable[[], Any]:
    """Build the candidate with the problem's ``overrides`` (those it shares apply to it too);
    return a factory for the module under test (seed it first), moved to ``device`` if given."""
    source = (workdir / job.candidate_file()).read_text()
    try:
        if job.kind == "cu":
            built = builder.build(CU_EXTENSION, source, "", None)
        else:
            own = candidate_overrides(source, job.handed.constants, overrides)
            built = load_source(source, CANDIDATE_MODULE, own, "candidate.py")
    except Decided:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to build or import decides the verdict
        if builder.failure:
            raise Decided(builder.failure) from exc
        raise Decided(
            Outcome(
                Verdict.RUNTIME_ERROR,
                f"importing the candidate failed: {first_line(exc)}",
                log=tail(traceback.format_exc()),
            )
        ) from exc
    if builder.failure:
        raise Decided(builder.failure)
    binding = None
    if job.kind == "cu":
        from cuset_core.verify.execution.binding import ReferenceLayout

        binding = (ReferenceLayout(**inputs["layout"]), inputs["weights"])
    n_inputs = len(inputs["trials"][0]) if inputs["trials"] else 0
    return candidate_factory(job.kind, built, inputs["init"], source, n_inputs, binding, device)


def start_prebuilds(job: CpuJob, workdir: Path, preludes: list[Path], chain, pool: ThreadPoolExecutor) -> dict:
    """Start g++ on the statically known extensions before torch is imported.

    Importing torch and the problem takes seconds that the compiler can use; ``Builder``
    picks a prebuilt library only when the unit it is asked for is exactly this one.
    """
    from cuset_core.verify.cpu.build import compile_extension, translation_unit

    built = {(entry.module, entry.digest): workdir / entry.file for entry in job.prebuilt}
    started = {}
    for ext in job.prebuild:
        module_name = extension_module_name(ext.cuda, ext.cpp, ext.functions)
        unit = translation_unit(module_name, ext.cuda, ext.cpp, ext.functions, job.device_boundary)
        library = built.get((module_name, unit_digest(unit)))
        if library is not None and library.is_file():  # compiled by the build side, next to the reference
            done: Future[Path] = Future()
            done.set_result(library)
            started[(module_name, unit)] = done
        else:
            started[(module_name, unit)] = pool.submit(compile_extension, module_name, unit, workdir, preludes, chain)
    return started


def build_side(job: CpuJob, workdir: Path, timings: dict[str, float]) -> Outcome:
    """Compile the statically known extensions only (g++ on the candidate's sources; none of its
    Python runs), while the reference side runs; a failed build is left to the candidate side."""
    from cuset_core.verify.cpu.build import compile_extension, translation_unit

    chain = Toolchain(tuple(job.include_dirs), tuple(job.library_dirs))
    preludes = [Path(folder) for folder in job.preludes]
    clock = time.perf_counter()
    built: list[PrebuiltLibrary] = []
    beyond_bridge = None
    for index, ext in enumerate(job.prebuild):
        module_name = extension_module_name(ext.cuda, ext.cpp, ext.functions)
        unit = translation_unit(module_name, ext.cuda, ext.cpp, ext.functions, job.device_boundary)
        try:
            library = compile_extension(module_name, unit, workdir, preludes, chain)
        except BuildError as exc:
            beyond_bridge = _beyond_bridge(job, index, module_name, unit, workdir, chain, exc)
            break
        built.append(PrebuiltLibrary(module=module_name, digest=unit_digest(unit), file=library.name))
    timings["prebuild"] = time.perf_counter() - clock
    return Outcome(Verdict.PASS, details=BuildDetails(built=built, beyond_bridge=beyond_bridge))


def _beyond_bridge(
    job: CpuJob, index: int, module_name: str, unit: str, workdir: Path, chain: Toolchain, failure: BuildError
) -> str | None:
    """Behind the device boundary, when the bridge did not build the ``index``-th extension: why,
    if one of ATen's preludes builds it (the bridge lacks what it uses), else None (a failure of its
    own)."""
    from cuset_core.verify.cpu.build import compile_extension

    if not job.beyond_bridge_preludes:
        return None
    heavier = [Path(folder) for folder in job.beyond_bridge_preludes]
    try:
        library = compile_extension(f"{module_name}_aten", unit, workdir, heavier, chain)
    except BuildError:
        return None
    library.unlink(missing_ok=True)  # never run: its tensors would hold device memory in the host
    first = failure.first_error or _first_error(str(failure))
    which = f"extension {index + 1} of {len(job.prebuild)}" if len(job.prebuild) > 1 else "the extension"
    return clip(f"{which} uses torch's C++ API beyond the bridge ({first})", 400)


def candidate_side(job: CpuJob, workdir: Path, timings: dict[str, float]) -> Outcome:
    """Build and run the candidate on the inputs the judge handed over; write its outputs."""
    chain = Toolchain(tuple(job.include_dirs), tuple(job.library_dirs))
    preludes = [Path(folder) for folder in job.preludes]
    monitor = FallbackMonitor()
    with ThreadPoolExecutor(max_workers=1) as pool:
        prebuilt = start_prebuilds(job, workdir, preludes, chain, pool)
        builder = Builder(workdir, preludes, timings, chain, prebuilt, monitor)
        return _run_candidate(job, workdir, timings, builder, monitor)


def _run_candidate(
    job: CpuJob, workdir: Path, timings: dict[str, float], builder: Builder, monitor: FallbackMonitor
) -> Outcome:
    import torch
    import torch.utils.cpp_extension

    torch.set_num_threads(1)
    # Global, so that the candidate's extensions bind the runtime's weak references to its switches.
    runtime = ctypes.CDLL(job.runtime_library, mode=ctypes.RTLD_GLOBAL)
    runtime.cuset_install_guarded_allocator()  # runtime/guarded_allocator.cpp
    set_kernel_resources(runtime, job.kernel_registers, job.kernel_shared_bytes)  # tier 1's launch limits
    map_cuda_to_cpu()
    tensors_say_cuda()
    # Bound before the candidate's code runs: it can rebind the harness module's names (the harness
    # is its __main__), and the kernels-off runs are the ones it would want gone.
    kernels_off_trial = _kernels_off_trial
    # The stand-ins accept the real signatures but do not declare every flag they ignore.
    torch.utils.cpp_extension.load_inline = builder.load_inline  # type: ignore[assignment]
    torch.utils.cpp_extension.load = builder.load  # type: ignore[assignment]
    inputs = load_values((workdir / INPUTS_FILE).read_bytes())
    with device_mode("cpu"), torch.no_grad():
        make_candidate = _import_candidate(job, workdir, builder, inputs, job.handed.overrides)
        clock = time.perf_counter()
        torch.manual_seed(INIT_SEED)
        candidate = make_candidate()
        outputs = _run_trials(candidate, inputs["trials"], builder, monitor, runtime)
        timings["run"] = time.perf_counter() - clock
        save_values(workdir / OUTPUTS_FILE, {"trials": outputs})
        outcome = Outcome(Verdict.PASS, launches=builder.launches(), built_with=builder.built_with)
        # The report goes first: at the second size or without its kernels the candidate may crash
        # or hang, which must not cost it what the judge reads of the first size.
        write_report(workdir, outcome)
        second = (
            _second_size_trials(job, workdir, builder, monitor, runtime, inputs["second"])
            if "second" in inputs
            else None
        )
        if inputs["trials"]:
            kernels_off_trial(candidate, inputs["trials"][0], workdir / KERNELS_OFF_FILE, timings, runtime)
        if second is not None:
            kernels_off_trial(*second, workdir / SECOND_KERNELS_OFF_FILE, timings, runtime)
    return outcome


def _run_trials(
    candidate: Any, trials: list[list[Any]], builder: Builder, monitor: FallbackMonitor, runtime: ctypes.CDLL
) -> list[Any]:
    """The candidate's outputs of every trial, each under the trial's fiber schedule; ``Decided``
    at the first trial whose launch failed or whose outputs did not come from its kernels."""
    outputs = []
    for trial, trial_inputs in enumerate(trials):
        runtime.cuset_set_schedule(trial)  # runtime/trial_switches.cpp
        with monitor:
            produced = call_forward(candidate, clone_values(trial_inputs), "candidate")
        if failure := builder.launch_failure():  # on a GPU the kernel would not have run
            raise Decided(Outcome(Verdict.RUNTIME_ERROR, f"trial {trial + 1}: {failure}", launches=builder.launches()))
        fallback = monitor.fallback_reason(produced)
        if fallback:
            raise Decided(Outcome(Verdict.STATIC_REJECT, f"trial {trial + 1}: {fallback}", launches=builder.launches()))
        outputs.append(produced)
    return outputs


def _second_size_trials(
    job: CpuJob,
    workdir: Path,
    builder: Builder,
    monitor: FallbackMonitor,
    runtime: ctypes.CDLL,
    inputs: dict[str, Any],
) -> tuple[Any, list[Any]] | None:
    """Run the trials of the second, smaller reduction: the candidate's module again at those sizes
    (its extensions as built), a fresh model; write ``SECOND_OUTPUTS_FILE`` and a report of their
    own (``SECOND_REPORT_FILE``, the launches of these trials only), or a report of the failure.
    Returns the model and its trial 1's inputs for the kernels-off run at this size (None when
    it failed).

    Same process: a second one would cost its start and torch's import again, seconds per candidate."""
    import torch

    clock = time.perf_counter()
    before = builder.launches()
    ran: tuple[Any, list[Any]] | None = None
    try:
        make_candidate = _import_candidate(job, workdir, builder, inputs, job.handed.second_overrides)
        torch.manual_seed(INIT_SEED)
        candidate = make_candidate()
        outputs = _run_trials(candidate, inputs["trials"], builder, monitor, runtime)
        save_values(workdir / SECOND_OUTPUTS_FILE, {"trials": outputs})
        launched = {kernel: count - before.get(kernel, 0) for kernel, count in builder.launches().items()}
        outcome = Outcome(Verdict.PASS, launches={kernel: count for kernel, count in launched.items() if count})
        ran = (candidate, inputs["trials"][0]) if inputs["trials"] else None
    except Decided as decided:
        outcome = decided.outcome
    except Exception as exc:  # noqa: BLE001 - the candidate's failure at the second size, reported as such
        outcome = Outcome(
            Verdict.RUNTIME_ERROR, f"the candidate failed: {first_line(exc)}", log=tail(traceback.format_exc())
        )
    outcome.timings_s = {"run": time.perf_counter() - clock}
    write_report(workdir, outcome, SECOND_REPORT_FILE)
    return ran


def _kernels_off_trial(
    candidate: Any,
    trial_inputs: list[Any],
    path: Path,
    timings: dict[str, float],
    runtime: ctypes.CDLL,
    save: Callable[[Path, dict[str, Any]], None] = save_values,
) -> None:
    """Run trial 1 (of a size) again with the runtime's launches running no block (a switch of the
    trusted runtime library, read at every launch; nothing the candidate's code can read says so)
    and write its outputs to ``path`` (``KERNELS_OFF_FILE``, or ``SECOND_KERNELS_OFF_FILE`` at the
    second size); nothing when it fails. ``save`` is bound when the harness module loads, before
    any code of the candidate's runs.

    Same process and model: a second process would cost its start and torch's import, seconds
    per candidate. An output the judge finds equal to the reference here was not computed by the
    kernels (``judge.kernels_did_the_work``)."""
    clock = time.perf_counter()
    runtime.cuset_set_kernels_on(0)
    runtime.cuset_set_schedule(0)
    try:
        produced = flatten_outputs(candidate(*clone_values(trial_inputs)))
        save(path, {"trials": [produced]})
    except Exception:  # noqa: BLE001 - a candidate that fails without its kernels needed them
        return
    timings[path.stem] = timings.get(path.stem, 0.0) + time.perf_counter() - clock


class BoundaryHost:
    """Behind the device boundary (``device.side``), the candidate's host process, one size per call:
    build and import the candidate, construct it on the device, run its trials on device tensors
    from the device process and name their outputs there. Its builder and device mode are made at
    the first size and kept for the second."""

    def __init__(self) -> None:
        self.builder: Builder | None = None
        self.mode: Any = None

    def __call__(self, job: CpuJob, workdir: Path, fd: int, runtime: ctypes.CDLL, size: int) -> Outcome:
        import torch

        from cuset_core.verify.cpu.device import client

        if self.builder is None:
            self.builder = self._open(job, workdir, fd, runtime)
            self.mode = client.device_factories()
        handed = client.setup(size)
        overrides = job.handed.overrides if size == 0 else job.handed.second_overrides
        with self.mode, torch.no_grad():
            inputs = {**handed, "trials": [[None] * handed["n_inputs"]]}
            make = _import_candidate(job, workdir, self.builder, inputs, overrides, device="cuda")
            torch.manual_seed(INIT_SEED)
            candidate = make()
            for trial in range(handed["n_trials"]):
                outputs = call_forward(candidate, client.trial_inputs(size, trial), "candidate")
                client.trial_outputs(outputs)
        return Outcome(Verdict.PASS, built_with=self.builder.built_with, timings_s=self.builder.timings)

    @staticmethod
    def _open(job: CpuJob, workdir: Path, fd: int, runtime: ctypes.CDLL) -> Builder:
        """Open the port and set torch up for device tensors; the builder of the candidate's extensions."""
        import torch
        import torch.utils.cpp_extension

        from cuset_core.verify.cpu import torch_bridge
        from cuset_core.verify.cpu.device import client

        client.open_port(runtime, fd)
        torch_bridge.BEHIND_DEVICE_BOUNDARY = True
        torch.cuda._lazy_init = lambda: None  # the device is the port; nothing to initialise
        torch.__future__.set_overwrite_module_params_on_conversion(True)
        chain = Toolchain(tuple(job.include_dirs), tuple(job.library_dirs))
        preludes = [Path(folder) for folder in job.preludes]
        prebuilt = start_prebuilds(job, workdir, preludes, chain, ThreadPoolExecutor(max_workers=1))
        builder = Builder(
            workdir, preludes, {}, chain, prebuilt, None, lambda path: client.library_loaded(str(path)), True
        )
        cpp_extension = "torch.utils.cpp_extension"
        torch.utils.cpp_extension.load_inline = as_if(
            lambda *args, **kwargs: builder.load_inline(*args, **kwargs), cpp_extension, "load_inline"
        )
        torch.utils.cpp_extension.load = as_if(
            lambda *args, **kwargs: builder.load(*args, **kwargs), cpp_extension, "load"
        )
        return builder


def side_main(side: str, job: CpuJob, workdir: Path, timings: dict[str, float]) -> Outcome:
    """One side of the tier-2 check (``reference`` or ``candidate``)."""
    if side == "candidate":
        plain_command_line()
        versions_say_cuda()
    if side == "candidate" and job.device_boundary:
        from cuset_core.verify.cpu.device import side as boundary

        map_cuda_to_cpu(move_tensors=False)
        return boundary.candidate_side(job, workdir, timings, BoundaryHost())
    sides = {"reference": reference_side, "candidate": candidate_side, "build": build_side}
    return sides[side](job, workdir, timings)


def warm_up() -> None:
    """What the candidate side imports before its files arrive (``run_side --late``)."""
    import safetensors.torch  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401

    import cuset_core.verify.cpu.build  # noqa: F401


if __name__ == "__main__":
    run_side(side_main, CpuJob, sys.argv[1:], "CPU", warm_up)
