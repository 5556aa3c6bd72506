"""What runs inside the sandboxed harness processes of the execution tiers: a side's entry point and
the helpers both tiers' harnesses share.

A harness module (``cuset_core.verify.cpu.harness``, ``cuset_core.verify.gpu.harness``) runs one
side per process through :func:`run_side`: it reads the side's ``job.json`` (:func:`read_job`),
runs it, stops at the first failure (``Decided``) and always leaves a ``report.json``
(:func:`write_report`) unless killed. The reference side draws each trial's inputs (every second
trial wide, :func:`trial_outputs`); the candidate side builds ``ModelNew``
(:func:`candidate_factory`) and calls it (:func:`call_forward`).
This module runs inside the sandbox, so it imports only the standard library and light parts of
``cuset_core.verify`` at the top; torch is imported where it is used.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, NoReturn

from cuset_core.verify.execution.contracts import (
    LATE_FILES,
    REPORT_FILE,
    WIDE_SCALE,
    Decided,
    JobT,
    Outcome,
    clip,
    tail,
)
from cuset_core.verify.result import Verdict
from cuset_core.verify.sandbox import unpack_files


def read_job(argv: list[str], job_type: type[JobT]) -> tuple[str, JobT, Path]:
    """The side (``reference``/``candidate``/``build``), job and work folder of a harness command
    line ``SIDE JOB_JSON``."""
    side, job_path = argv[0], Path(argv[1]).resolve()
    return side, job_type.model_validate_json(job_path.read_bytes()), job_path.parent


def write_report(workdir: Path, outcome: Outcome, name: str = REPORT_FILE) -> None:
    """Write ``outcome`` as the side's report (or the report ``name``), atomically (a killed
    harness leaves none)."""
    report = asdict(replace(outcome, details=None))
    report["reason"], report["log"] = clip(report["reason"]), tail(report["log"])
    report["details"] = outcome.details.model_dump(mode="json") if outcome.details is not None else {}
    partial = workdir / (name + ".tmp")
    partial.write_text(json.dumps(report, default=str))
    partial.replace(workdir / name)


def run_side(
    side_main: Callable[[str, JobT, Path, dict[str, float]], Outcome],
    job_type: type[JobT],
    argv: list[str],
    harness: str,
    warm_up: Callable[[], None] = lambda: None,
) -> NoReturn:
    """Entry point of a harness: run one side, always leave a report unless killed, and exit.

    With ``--late`` first, the harness was started ahead of its files: it runs ``warm_up``
    (imports torch, say) while the judge prepares them, then unpacks the archive the judge sends
    on stdin into the job's folder. It exits with ``os._exit`` once the report is written:
    torch's interpreter shutdown costs half a second per side, and no exit hook of the
    candidate's runs after the outputs are final."""
    if argv[:1] == [LATE_FILES]:
        argv = argv[1:]
        # torch's import makes some 10^5 objects and no garbage worth collecting: without the
        # collector it costs ~7% less CPU (2.7 s instead of 2.9 s a side, perf stat), and frozen,
        # they are not scanned again by the collections of the run.
        gc.disable()
        warm_up()
        gc.freeze()
        gc.enable()
        unpack_files(sys.stdin.buffer.read(), Path(argv[1]).resolve().parent)
    side, job, workdir = read_job(argv, job_type)
    timings: dict[str, float] = {}
    try:
        outcome = side_main(side, job, workdir, timings)
    except Decided as decided:
        outcome = decided.outcome
    except Exception:  # noqa: BLE001 - report, never crash without a result
        verdict = Verdict.INTERNAL_ERROR if side == "reference" else Verdict.RUNTIME_ERROR
        outcome = Outcome(verdict, f"the {harness} harness failed on the {side} side", log=tail(traceback.format_exc()))
    outcome.timings_s = {**timings, **outcome.timings_s}
    write_report(workdir, outcome)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def candidate_factory(
    kind: str,
    built: Any,
    init_inputs: list[Any],
    source: str,
    n_inputs: int,
    binding: tuple[Any, dict[str, Any]] | None = None,
    device: Any = None,
) -> Callable[[], Any]:
    """A function that constructs the module under test (seed before calling it), moved to
    ``device`` when one is given; it raises ``Decided`` (``runtime_error``) when that fails.

    ``built`` is the imported candidate module for a Python candidate (it must define
    ``ModelNew``), or the built extension for a ``.cu`` candidate, whose ``forward`` is bound to
    the reference's weights: ``binding`` is the reference's ``(ReferenceLayout, named tensors)``
    and ``source`` the ``.cu`` text the binding reads.
    """
    if kind == "cu":
        from cuset_core.verify.execution.binding import BindingError, bind_extension

        if binding is None:
            raise ValueError("a .cu candidate needs the reference's binding")

        def construct() -> Any:
            layout, tensors = binding
            tensors = {name: t.clone() if device is None else t.to(device) for name, t in tensors.items()}
            try:
                return bind_extension(layout, tensors, init_inputs, n_inputs, source, built.forward)
            except BindingError as exc:
                raise Decided(Outcome(Verdict.RUNTIME_ERROR, f"cannot bind the .cu forward: {exc}")) from exc
    else:
        if not hasattr(built, "ModelNew"):
            raise Decided(Outcome(Verdict.RUNTIME_ERROR, "the candidate defines no ModelNew"))

        def construct() -> Any:
            return built.ModelNew(*init_inputs)

    def guarded() -> Any:
        try:
            model = construct()
            return model if device is None else model.to(device)
        except Decided:
            raise
        except Exception as exc:  # noqa: BLE001 - a constructor crash decides the verdict
            raise Decided(
                Outcome(Verdict.RUNTIME_ERROR, f"constructing ModelNew failed: {exc}", log=tail(traceback.format_exc()))
            ) from exc

    return guarded


def flatten_outputs(output: Any) -> list[Any]:
    """A forward's result as a flat list: a tensor becomes ``[tensor]``, tuples/lists unpack."""
    if isinstance(output, (tuple, list)):
        return [item for element in output for item in flatten_outputs(element)]
    return [output]


def clone_values(values: list[Any]) -> list[Any]:
    """``values`` with every tensor cloned: each side's call gets inputs of its own."""
    import torch

    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def call_forward(
    model: Any,
    inputs: list[Any],
    what: str,
    verdict: Verdict = Verdict.RUNTIME_ERROR,
    settle: Callable[[], None] = lambda: None,
) -> list[Any]:
    """``model(*inputs)`` flattened; a failure (raised by the call or by ``settle``, run after it:
    a device synchronisation) decides the verdict: ``verdict`` with "<what> forward failed"."""
    try:
        output = model(*inputs)
        settle()
    except Decided:
        raise
    except Exception as exc:  # noqa: BLE001 - a crash of either side decides the verdict
        raise Decided(
            Outcome(verdict, f"{what} forward failed: {first_line(exc)}", log=tail(traceback.format_exc()))
        ) from exc
    return flatten_outputs(output)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (200 characters at most), or its type's name."""
    return str(exc).splitlines()[0][:200] if str(exc).strip() else type(exc).__name__


def trial_outputs(
    inputs: list[Any], run: Callable[[list[Any]], list[Any]], wide: bool
) -> tuple[list[Any], list[Any], bool]:
    """The inputs, reference outputs and whether they are wide, for one trial drawn as ``inputs``.

    ``run`` computes the reference's outputs. A wide trial scales the floating-point tensors of
    ``inputs`` by ``WIDE_SCALE`` and keeps them when the reference runs on them and its outputs
    stay finite; else (a log, a power, fp16 overflow, a range check) the plain inputs are used,
    so the wide distribution never turns a problem's own numerics against a candidate."""
    if wide:
        scaled = [_scaled(value) for value in inputs]
        try:
            outputs = run(scaled)
        except Exception:  # noqa: BLE001 - the problem's own limits: this trial keeps the plain inputs
            outputs = None
        if outputs is not None and all_finite(outputs):
            return scaled, outputs, True
    return inputs, run(inputs), False


def _scaled(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value * WIDE_SCALE
    return value


def all_finite(values: list[Any]) -> bool:
    """Whether every floating-point tensor among ``values`` holds finite numbers only."""
    import torch

    return all(
        bool(torch.isfinite(value).all())
        for value in values
        if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())
    )


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


def changed_inputs(before: list[Any], after: list[Any]) -> list[int]:
    """Indices of the tensors of ``before`` (as drawn) that ``after`` (what forward was given) no
    longer equals bit for bit: the inputs a forward wrote into."""
    import torch

    changed = []
    for index, (old, new) in enumerate(zip(before, after)):
        if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor):
            same = old.shape == new.shape and old.dtype == new.dtype
            if not same or not torch.equal(old.view(-1).view(torch.uint8), new.reshape(-1).view(torch.uint8)):
                changed.append(index)
    return changed
