"""The candidate side of tier 2 behind the device boundary: the device process forks the host.

Order matters for what the host can ever see. Before the fork, the device process reserves the
device address range (the host keeps it as PROT_NONE, so it faults on any device address), opens
the inputs file and removes it from the folder, and reads the build side's libraries. After the
fork it alone reads the inputs and holds device memory; it is not dumpable, so the host cannot
read its memory through /proc or ptrace. The host runs the candidate (:func:`host_main`); when it
has ended, the device process stops whatever it left running, replays each trial with the kernels
off and writes the files the judge reads (:func:`device_main`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cuset_core.verify.cpu.build import set_kernel_resources
from cuset_core.verify.execution.contracts import (
    INPUTS_FILE,
    KERNELS_OFF_FILE,
    OUTPUTS_FILE,
    SECOND_KERNELS_OFF_FILE,
    SECOND_OUTPUTS_FILE,
    SECOND_REPORT_FILE,
    CandidateJob,
    CandidateReport,
    CpuJob,
    Decided,
    Outcome,
    host_off_file,
    tail,
    torch_made_file,
)
from cuset_core.verify.result import Verdict

ARENA_BYTES = 1 << 30  # address space (RLIMIT_AS counts it), committed as it is allocated
# At least this much, else the sandbox's address-space limit leaves no room for a device.
MIN_ARENA_BYTES = 64 << 20
HOST_REPORT_FILE = "host_report.json"
HOST_SECOND_REPORT_FILE = "host_second_report.json"
_PR_SET_DUMPABLE = 4


def arena_bytes() -> int:
    """The device range to reserve, bytes: ARENA_BYTES, or half the address space this process has
    left under its RLIMIT_AS when that is less (a CUDA build of torch maps about 3 GiB of libraries
    on import, most of a 4 GiB limit), but never under MIN_ARENA_BYTES."""
    import resource

    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit == resource.RLIM_INFINITY:
        return ARENA_BYTES
    spare = (limit - _address_space_used()) // 2 // (1 << 20) * (1 << 20)
    return max(MIN_ARENA_BYTES, min(ARENA_BYTES, spare))


def reserve_device_range(runtime: ctypes.CDLL, size: int) -> int:
    """Reserve the device process's address range of ``size`` bytes in the runtime library
    (loaded with ``use_errno``); returns its start, or raises RuntimeError saying why not."""
    import resource

    reserve = runtime.cuset_reserve_arena
    # An address: ctypes' default result type, a C int, keeps only its low 32 bits, which are all
    # zero for one large mapping in 2,048 (the kernel places them on 2 MiB boundaries).
    reserve.restype, reserve.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    start: int | None = reserve(size)
    if start:
        return start
    error = os.strerror(ctypes.get_errno())
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    room = "no limit" if limit == resource.RLIM_INFINITY else f"a limit of {limit >> 20} MiB"
    raise RuntimeError(
        f"cuset runtime: the device process could not reserve its address range of {size >> 20} MiB "
        f"({error}; {_address_space_used() >> 20} MiB of address space in use, {room})"
    )


def _address_space_used() -> int:
    """This process's mapped address space (``VmSize``), bytes."""
    status = Path("/proc/self/status").read_text()
    return next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmSize:"))


# The host's side of a size: build and import the candidate, run its trials through the port
# (``fd``), and say what it failed at (``harness.BoundaryHost``).
HostTrials = Callable[[CpuJob, Path, int, ctypes.CDLL, int], Outcome]


def candidate_side(job: CpuJob, workdir: Path, timings: dict[str, float], host_trials: HostTrials) -> Outcome:
    """Run the candidate behind the device boundary; returns the first size's outcome (the
    harness writes it as the report; the other files are written here)."""
    import torch

    from cuset_core.verify.execution.transfer import load_values

    torch.set_num_threads(1)
    runtime = ctypes.CDLL(job.runtime_library, mode=ctypes.RTLD_GLOBAL, use_errno=True)
    runtime.cuset_install_guarded_allocator()
    set_kernel_resources(runtime, job.kernel_registers, job.kernel_shared_bytes)  # tier 1's launch limits
    arena = arena_bytes()
    device_range = (start := reserve_device_range(runtime, arena), start + arena)
    inputs_fd = os.open(workdir / INPUTS_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    os.unlink(workdir / INPUTS_FILE)
    libraries = {entry.file: (workdir / entry.file).read_bytes() for entry in job.prebuilt}
    device_end, host_end = socket.socketpair()
    output_read, output_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        device_end.close()
        os.close(inputs_fd)
        os.close(output_read)
        os.dup2(output_write, 1)
        os.dup2(output_write, 2)
        os._exit(host_main(job, workdir, host_end.fileno(), runtime, host_trials))
    host_end.close()
    os.close(output_write)
    ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    runtime.cuset_arena_allocate()
    with os.fdopen(inputs_fd, "rb") as handed:
        inputs = load_values(handed.read())
    sizes = [{k: v for k, v in inputs.items() if k != "second"}]
    if "second" in inputs:
        sizes.append(inputs["second"])
    host_output: list[bytes] = []
    reader = threading.Thread(target=_collect, args=(output_read, host_output), daemon=True)
    reader.start()
    return device_main(
        job, workdir, timings, sizes, libraries, runtime, device_range, device_end, pid, reader, host_output
    )


def device_main(
    job: CpuJob,
    workdir: Path,
    timings: dict[str, float],
    sizes: list[dict[str, Any]],
    libraries: dict[str, bytes],
    runtime: ctypes.CDLL,
    device_range: tuple[int, int],
    sock: socket.socket,
    host: int,
    reader: threading.Thread,
    host_output: list[bytes],
) -> Outcome:
    from cuset_core.verify.cpu.device.server import Device, ReplayError
    from cuset_core.verify.execution.harness_side import write_report
    from cuset_core.verify.execution.transfer import save_values

    clock = time.perf_counter()
    device = Device(sizes, libraries, runtime, device_range, bytes.fromhex(job.kernel_filter))
    device.serve(sock)
    _, status = os.waitpid(host, 0)
    _stop_the_rest()
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
        # The host ran out of the sandbox's CPU time: the side's limit, which the judge reads as
        # the side's own (a timeout, with its retry at smaller sizes), not a crash.
        signal.signal(signal.SIGXCPU, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGXCPU)
    reader.join(timeout=5)
    timings["run"] = time.perf_counter() - clock
    said = b"".join(host_output).decode(errors="replace")
    outcomes = []
    for size, (outputs_file, off_file, host_report) in enumerate(
        [
            (OUTPUTS_FILE, KERNELS_OFF_FILE, HOST_REPORT_FILE),
            (SECOND_OUTPUTS_FILE, SECOND_KERNELS_OFF_FILE, HOST_SECOND_REPORT_FILE),
        ][: len(sizes)]
    ):
        outcome = _outcome(device, size, workdir / host_report, status, said, job.handed)
        outputs = device.output_values(size)
        if outcome.verdict is Verdict.PASS and outputs is not None:
            save_values(workdir / outputs_file, {"trials": outputs})
            clock = time.perf_counter()
            trial = device.draw_replayed_trial(size)
            try:
                kernels_off = device.replay(size, trial)
                save_values(workdir / off_file, {"trials": [kernels_off], "trial": trial})
                _save_torch_made(device, size, trial, workdir / torch_made_file(off_file))
                host_off = device.replay(size, trial, host_off=True)
                save_values(workdir / host_off_file(off_file), {"trials": [host_off], "trial": trial})
            except ReplayError as exc:
                reason = f"trial {trial + 1}: the kernels-off replay did not complete ({exc}); a pass needs it"
                outcome = Outcome(Verdict.STATIC_REJECT, reason, launches=outcome.launches)
            timings[Path(off_file).stem] = time.perf_counter() - clock
        outcome.transfers, outcome.computes = list(device.transfers), list(device.computes)
        outcome.torch_ops = dict(device.torch_ops)
        outcomes.append(outcome)
    if len(outcomes) > 1:
        write_report(workdir, outcomes[1], SECOND_REPORT_FILE)
    return outcomes[0]


def _save_torch_made(device: Any, size: int, trial: int, path: Path) -> None:
    """What torch computed on the device in the kernels-off replay of ``trial`` at ``size``
    (``Trial.torch_made``, copies outside device memory, written without another), for the judge."""
    from cuset_core.verify.execution.transfer import save_values

    record = device.trials.get((size, trial))
    if record is not None:
        save_values(path, record.torch_made_values(), copy=False)


def _outcome(device: Any, size: int, host_report: Path, status: int, said: str, handed: CandidateJob) -> Outcome:
    """The verdict the candidate side reports at ``size``: a launch refused for a host address in
    its arguments, a launch that failed unchecked, the
    host's own claim of failure, a trial it never finished, an output that shares an input's memory
    or an input forward wrote into (where the reference does neither: tier 3's rule), or a pass
    (the judge decides)."""
    from cuset_core.verify.execution.transfer import UntrustedFileError, read_report

    trials = sorted(trial for (s, trial) in device.trials if s == size)
    launches = device.launches_at(size)
    if device.fault:
        return Outcome(Verdict.RUNTIME_ERROR, device.fault, launches=launches)
    for trial in trials:
        failure = device.trials[(size, trial)].launch_failure
        if failure:
            return Outcome(Verdict.RUNTIME_ERROR, f"trial {trial + 1}: {failure}", launches=launches)
    try:
        claim = read_report(host_report.parent, CandidateReport, host_report.name)
    except UntrustedFileError as exc:
        return Outcome(Verdict.RUNTIME_ERROR, f"the candidate's host process left a report that is rejected: {exc}")
    if claim is not None and claim.verdict != "pass":
        # The device's own traceback of an operation that failed on it (the host heard its type
        # only) goes with the host's, as it does when the host process dies.
        return Outcome(
            Verdict(claim.verdict),
            claim.reason,
            log=tail(claim.log + device.host_error),
            unsupported_feature=claim.unsupported_feature,
            launches=launches,
            built_with=dict(claim.built_with),
        )
    expected = len(device.sizes[size]["trials"])
    finished = [trial for trial in trials if device.trials[(size, trial)].outputs is not None]
    if device.unknown_libraries:
        names = ", ".join(device.unknown_libraries)
        from cuset_core.verify.cpu.device.server import not_built_ahead

        return Outcome(Verdict.RUNTIME_ERROR, not_built_ahead(names), launches=launches)
    if claim is None or len(finished) < expected:
        how = f"exit status {os.waitstatus_to_exitcode(status)}" if status else "before it named every trial's outputs"
        reason = f"the candidate's host process ended ({how}) after {len(finished)} of {expected} trials"
        runtime_line = next((line for line in said.splitlines() if line.startswith("cuset runtime:")), None)
        if runtime_line:
            reason += f": {runtime_line}"
        return Outcome(Verdict.RUNTIME_ERROR, reason, log=tail(said + device.host_error), launches=launches)
    for trial in trials:
        record = device.trials[(size, trial)]
        if record.aliased and not handed.reference_aliases:
            output, given = record.aliased[0]
            reason = f"anti-hacking: trial {trial + 1}: output {output} shares memory with input {given}"
            return Outcome(Verdict.RUNTIME_ERROR, reason, launches=launches)
        if record.changed and not handed.reference_mutates:
            reason = f"anti-hacking: trial {trial + 1}: forward wrote into input {record.changed[0]}"
            return Outcome(Verdict.RUNTIME_ERROR, reason, launches=launches)
        if record.launches_after == record.launches_before:
            reason = (
                f"trial {trial + 1}: run-time fallback: forward never called a custom extension (no kernel launched)"
            )
            return Outcome(Verdict.STATIC_REJECT, reason, built_with=dict(claim.built_with))
    return Outcome(Verdict.PASS, launches=launches, built_with=dict(claim.built_with), timings_s=dict(claim.timings_s))


def _collect(fd: int, into: list[bytes]) -> None:
    """The host's stdout and stderr, passed on to this process's stderr and kept for the report."""
    with os.fdopen(fd, "rb") as stream:
        for chunk in iter(lambda: stream.read1(65536), b""):
            into.append(chunk)
            os.write(2, chunk)


def _stop_the_rest() -> None:
    """Stop every process the host left (a daemon could rewrite files after the outputs are
    written): all of this sandbox's PID namespace but this process, when it has one of its own."""
    if os.getpid() <= 2:  # bwrap's PID namespace: its init is 1, the harness 2
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass


def host_main(job: CpuJob, workdir: Path, fd: int, runtime: ctypes.CDLL, host_trials: HostTrials) -> int:
    """The candidate's host process: build and import it, run every trial on device tensors from
    the device process and name their outputs. Its report says only what it failed at."""
    from cuset_core.verify.cpu.device import client
    from cuset_core.verify.execution.harness_side import write_report

    try:
        outcome = host_trials(job, workdir, fd, runtime, 0)
    except Decided as decided:
        outcome = decided.outcome
    except Exception as exc:  # noqa: BLE001 - the candidate's failure, reported as such
        outcome = Outcome(Verdict.RUNTIME_ERROR, f"the candidate failed: {exc}", log=tail(traceback.format_exc()))
    write_report(workdir, outcome, HOST_REPORT_FILE)
    if outcome.verdict is not Verdict.PASS or client.setup(0)["sizes"] < 2:
        return 0
    try:
        second = host_trials(job, workdir, fd, runtime, 1)
    except Decided as decided:
        second = decided.outcome
    except Exception as exc:  # noqa: BLE001
        second = Outcome(Verdict.RUNTIME_ERROR, f"the candidate failed: {exc}", log=tail(traceback.format_exc()))
    write_report(workdir, second, HOST_SECOND_REPORT_FILE)
    return 0
