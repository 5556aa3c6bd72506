"""The device process of tier 2's device boundary: it owns device memory and runs the kernels.

The candidate's host process (its Python, its C++ binding) is forked from this one and reaches
the device only through the port (``protocol``): torch operations on device tensors, copies,
allocations and launches arrive as requests and run here, on tensors the host never maps. The
host names a trial's outputs; they are taken from here (``Device.outputs``), never from anything
the host wrote.

Every request of every trial is recorded, and each operation is classified by the data-flow
policy (:mod:`cuset_core.verify.policy`): what the ``kernels`` policy forbids is kept as a
violation for the judge, whichever policy it applies. Each trial's outputs are copied when the host
names them, so nothing written afterwards is judged. Trials start in order, each once: no request
hands the host another trial's inputs. Once the host is gone, one trial drawn then is replayed here
from the device memory it started with, launches skipped (:meth:`Device.replay`): the kernels-off
run, which the host cannot observe, so it cannot behave differently in it.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import socket
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cuset_core.verify.cpu.build import launch_counts, launch_failure
from cuset_core.verify.cpu.device import elf
from cuset_core.verify.cpu.device.containment import host_mappings, host_words, illegal_address
from cuset_core.verify.cpu.device.protocol import (
    REQUEST,
    Attribute,
    Copy,
    FrameError,
    Free,
    Inputs,
    LastError,
    Launch,
    Load,
    Malloc,
    Memset,
    Operator,
    Outputs,
    Refused,
    Release,
    Reply,
    Setup,
    StreamCall,
    Symbol,
    decode,
    encode,
    host_tensors,
    receive_frame,
    reply_bytes,
    send_frame,
)
from cuset_core.verify.cpu.device.streams import DEFAULT_STREAM, StreamOrder
from cuset_core.verify.execution.contracts import TORCH_MADE_CAP_BYTES
from cuset_core.verify.execution.harness_side import aliased_pairs, changed_inputs
from cuset_core.verify.policy import (
    ALLOCATION_OPS,
    DATA_MOVEMENT_OPS,
    MAX_VIOLATIONS,
    METADATA_OPS,
    VIEW_OPS,
    Access,
    layout_slot,
    narrowing_copy,
    operator_access,
    violation,
)

_INVALID_VALUE, _INVALID_DEVICE_FUNCTION, _INVALID_SYMBOL, _ILLEGAL_ADDRESS = 1, 98, 13, 700
# Operators whose result is a host tensor: a copy to the CPU.
_TO_HOST = frozenset({"aten::_to_copy", "aten::to", "aten::_copy_from_and_resize"})
# Operators that read no device data, so no stream's work needs to come before them.
_UNORDERED = ALLOCATION_OPS | METADATA_OPS | VIEW_OPS


class HostError(Exception):
    """What the host asked is not something a GPU would do: the candidate's error."""


@dataclass
class Library:
    """A candidate extension as the device process loaded it: no initialiser ran."""

    handle: ctypes.CDLL
    base: int
    entries: set[int]
    size: int


class ReplayError(Exception):
    """A kernels-off replay that could not complete: it raised, or made what the trial did not."""


@dataclass
class Trial:
    """What one trial recorded: the outputs the host named (the tensors, and copies made when it
    named them), the device memory it started from and each request that changed device memory,
    for a replay of any trial drawn once the host is gone."""

    number: int  # 0-based, at its size
    start: list[tuple[Any, Any]]  # (storage view, its bytes at the trial's start)
    rng: Any
    log: list[tuple[str, Any]] = field(default_factory=list)
    outputs: list[Any] | None = None  # the device tensors (or values) the host named
    returned: list[Any] | None = None  # copies of ``outputs`` made when the host named them: what is judged
    given: list[Any] = field(default_factory=list)  # the inputs handed to the host (device tensors)
    drawn: list[Any] = field(default_factory=list)  # the same as drawn, which no request can reach
    aliased: list[tuple[int, int]] = field(default_factory=list)  # (output, input) sharing storage
    changed: list[int] = field(default_factory=list)  # inputs forward wrote into
    launch_failure: str = ""
    launches_before: dict[str, int] = field(default_factory=dict)
    launches_after: dict[str, int] = field(default_factory=dict)
    # The kernels-off replay's torch compute: (operator, a copy of each result as it was made,
    # outside device memory), up to TORCH_MADE_CAP_BYTES, for the judge to compare with the
    # expected outputs: what torch computed without the candidate's kernels.
    torch_made: list[tuple[str, Any]] = field(default_factory=list)
    torch_made_bytes: int = 0

    def keep_torch_made(self, name: str, result: Any) -> None:
        import torch

        for value in _flat(result):
            if not isinstance(value, torch.Tensor) or value.numel() < 2:
                continue
            size = value.numel() * value.element_size()
            if self.torch_made_bytes + size > TORCH_MADE_CAP_BYTES:
                return
            self.torch_made_bytes += size
            data = value.detach().contiguous().view(-1).view(torch.uint8).numpy().copy()  # on the heap
            self.torch_made.append((name, (data, value.dtype, tuple(value.shape))))

    def torch_made_values(self) -> dict[str, Any]:
        """What :meth:`keep_torch_made` kept, as ``save_values`` groups: ``names`` and ``values``."""
        import torch

        values = [torch.from_numpy(data).view(dtype).reshape(shape) for _, (data, dtype, shape) in self.torch_made]
        return {"names": [name for name, _ in self.torch_made], "values": values}


def not_built_ahead(library: str) -> str:
    """Why the device process refuses to load ``library``: the host built it while the candidate ran."""
    return (
        f"the extension {library} was built from sources the answer does not state literally (made at run"
        " time); behind the device boundary only the extensions built ahead from the answer's source run"
    )


class Device:
    """The device side: handles, memory, libraries, trials. ``sizes[size]`` is what the reference
    side handed over for a size (``trials``: each trial's inputs, CPU tensors here, which is device
    memory; ``init`` and a ``.cu`` candidate's binding), ``libraries`` the candidate's extensions
    by file name (copies made before the host existed). Kernels run on the runtime's kernel thread,
    under ``kernel_filter`` (``containment.kernel_filter``)."""

    def __init__(
        self,
        sizes: list[dict[str, Any]],
        libraries: dict[str, bytes],
        runtime: ctypes.CDLL,
        device_range: tuple[int, int],
        kernel_filter: bytes,
    ) -> None:
        self.sizes = sizes
        self.runtime = runtime  # the trusted runtime library: schedule and kernels-on switches
        self.device_range = device_range  # [start, end): the address range cudaMalloc and device tensors use
        self.libraries: dict[str, Library] = {name: _load(name, data) for name, data in libraries.items()}
        _start_kernel_thread(runtime, kernel_filter)
        # What a kernel argument may not point into, read once the candidate's libraries are here.
        self.host_memory = host_mappings(Path("/proc/self/maps").read_text(), self._device_ranges())
        # A launch refused for a host address in its arguments: the device is unusable from then on,
        # as a GPU's context after an illegal memory access, and the verdict is its runtime error.
        self.fault = ""
        self.tensors: dict[int, Any] = {}
        # id(tensor) -> its handle, so an operation returning one of its inputs (in place) hands
        # back that input's handle; checked against ``tensors``, since ids are reused after a free.
        self._handles: dict[int, int] = {}
        self.allocations: dict[int, Any] = {}  # cudaMalloc: address -> the uint8 tensor holding it
        self._next = 1
        self.trials: dict[tuple[int, int], Trial] = {}
        self.current: Trial | None = None
        self.unknown_libraries: list[str] = []
        self.host_error = ""
        # What the policies forbid, in order, at most MAX_VIOLATIONS of each: device data that
        # reached the host (both policies) and torch compute during a forward (``kernels``); and
        # torch's compute operators during forwards by name, what a ``mixed`` pass lists.
        self.transfers: list[str] = []
        self.computes: list[str] = []
        self.torch_ops: dict[str, int] = {}
        # Work on streams other than the default one waits until something synchronises it, as late
        # as a GPU may run it; torch's operators run on the binding's current stream. Tensors the
        # host released stay alive while work is pending (it may write them).
        self.order = StreamOrder()
        self.torch_stream = DEFAULT_STREAM
        self._held: list[Any] = []
        # A device operation that failed once trials began: whether it fails can depend on device
        # data (an assert, an index out of range), one bit per try, so from then on every request
        # fails with it, as a GPU's context does after a device-side assert.
        self.failed = ""

    # ------------------------------------------------------------ serving

    def serve(self, sock: socket.socket) -> None:
        """Answer the host's requests until it closes the socket (or dies)."""
        while True:
            try:
                header, payload = receive_frame(sock)
            except (FrameError, OSError):
                return
            out_payload = b""
            try:
                request = REQUEST.validate_json(header)
                self._release(request.release)
                if self.failed:
                    raise HostError(self.failed)
                reply, out_payload = self.handle(request, payload)
            except (ValidationError, Refused, HostError) as exc:
                reply = Reply(error_code=_INVALID_VALUE, error=str(exc)[:2000])
            except Exception as exc:  # noqa: BLE001 - torch's errors on the host's operations are the host's
                # Once trials begin an error's text may carry device data ("index 1234 is out of
                # bounds"): the host gets its type only; the judge's log keeps the whole traceback.
                said = f"{type(exc).__name__}: {exc}" if not self.trials else type(exc).__name__
                reply = Reply(error_code=_INVALID_VALUE, error=f"{said} (in a device operation)"[:2000])
                self.host_error = traceback.format_exc()[-4000:]
                if self.trials:
                    self.failed = f"the device is unusable after an operation failed on it during the trials ({said})"
            send_frame(sock, reply_bytes(reply), out_payload)

    def handle(self, request: Any, payload: bytes) -> tuple[Reply, bytes]:
        handlers: dict[type, Callable[[Any, bytes], tuple[Reply, bytes]]] = {
            Malloc: self._malloc,
            Free: self._free,
            Copy: self._copy,
            Memset: self._memset,
            Launch: self._launch,
            Attribute: self._attribute,
            Symbol: self._symbol,
            StreamCall: self._stream,
            LastError: self._last_error,
            Load: self._load,
            Operator: self._operator,
            Setup: self._setup,
            Inputs: self._inputs,
            Outputs: self._outputs,
            Release: lambda _request, _payload: (Reply(), b""),
        }
        return handlers[type(request)](request, payload)

    # ------------------------------------------------------------ memory

    def _new_handle(self, tensor: Any) -> int:
        handle, self._next = self._next, self._next + 1
        self.tensors[handle] = tensor
        self._handles[id(tensor)] = handle
        return handle

    def _release(self, handles: list[int]) -> None:
        if self.order.idle():
            self._held.clear()
        for handle in handles:
            tensor = self.tensors.pop(handle, None)  # a trial's log keeps what its replay needs
            if tensor is not None and self._handles.get(id(tensor)) == handle:
                del self._handles[id(tensor)]
            if tensor is not None and not self.order.idle():
                self._held.append(tensor)

    def tensor(self, handle: int) -> Any:
        try:
            return self.tensors[handle]
        except KeyError:
            raise HostError(f"no device tensor {handle}") from None

    def _regions(self) -> list[tuple[int, int]]:
        """(start, end) of every piece of device memory the host may name."""
        regions = {}
        for tensor in [*self.tensors.values(), *self.allocations.values()]:
            storage = tensor.untyped_storage()
            regions[storage.data_ptr()] = storage.data_ptr() + storage.nbytes()
        return list(regions.items())

    def _check_device(self, address: int, n: int) -> None:
        if n == 0:
            return
        if not any(start <= address and address + n <= end for start, end in self._regions()):
            raise HostError(f"{n} bytes at {address:#x} are not device memory the host allocated (an illegal address)")

    def _malloc(self, request: Malloc, _payload: bytes) -> tuple[Reply, bytes]:
        import torch

        block = torch.empty(max(request.bytes, 1), dtype=torch.uint8)  # poisoned by the allocator
        self.allocations[block.data_ptr()] = block
        self._record("malloc", block)
        return Reply(ptr=block.data_ptr()), b""

    def _free(self, request: Free, _payload: bytes) -> tuple[Reply, bytes]:
        self.order.synchronize_device()  # cudaFree waits for the device
        if self.allocations.pop(request.ptr, None) is None and request.ptr:
            return Reply(error_code=_INVALID_VALUE), b""
        return Reply(), b""

    def _copy(self, request: Copy, payload: bytes) -> tuple[Reply, bytes]:
        if request.op == "h2d":
            if len(payload) != request.n:
                raise HostError("a host-to-device copy whose bytes did not come with it")
            self._check_device(request.dst, request.n)

            def h2d() -> None:
                ctypes.memmove(request.dst, payload, request.n)
                self._record("h2d", (request.dst, payload))

            self.order.submit(request.stream, request.nonblocking, h2d)
            return Reply(), b""
        if request.op == "d2h":
            self._check_device(request.src, request.n)
            self._police(Access.TO_HOST, "cudaMemcpy (device to host)")
            self.order.before(request.stream)
            return Reply(), ctypes.string_at(request.src, request.n)
        self._check_device(request.src, request.n)
        self._check_device(request.dst, request.n)

        def d2d() -> None:
            ctypes.memmove(request.dst, request.src, request.n)
            self._record("d2d", (request.dst, request.src, request.n))

        self.order.submit(request.stream, request.nonblocking, d2d)
        return Reply(), b""

    def _memset(self, request: Memset, _payload: bytes) -> tuple[Reply, bytes]:
        self._check_device(request.dst, request.n)

        def memset() -> None:
            ctypes.memset(request.dst, request.value, request.n)
            self._record("memset", (request.dst, request.value, request.n))

        self.order.submit(request.stream, request.nonblocking, memset)
        return Reply(), b""

    def _stream(self, request: StreamCall, _payload: bytes) -> tuple[Reply, bytes]:
        order, stream, event = self.order, request.stream, request.event
        if request.action == "current":
            self.torch_stream = stream
            return Reply(), b""
        calls: dict[str, Callable[[], int | None]] = {
            "synchronize": lambda: order.synchronize(stream),
            "synchronize_device": order.synchronize_device,
            "record": lambda: order.record(event, stream),
            "wait": lambda: order.wait(event),
            "query": lambda: order.query(stream),
            "query_event": lambda: order.query_event(event),
        }
        return Reply(error_code=calls[request.action]() or 0), b""

    # ------------------------------------------------------------ kernels

    def _library(self, name: str) -> Library | None:
        library = self.libraries.get(name)
        if library is None and name not in self.unknown_libraries:
            self.unknown_libraries.append(name)
        return library

    def _load(self, request: Load, _payload: bytes) -> tuple[Reply, bytes]:
        if self._library(request.library) is None:
            return Reply(error=not_built_ahead(request.library)), b""
        return Reply(), b""

    def _device_ranges(self) -> list[tuple[int, int]]:
        """The device memory a kernel argument may point into, [start, end) byte addresses: the device
        range (``cudaMalloc``, device tensors) and each candidate library (its ``__constant__`` and
        ``__device__`` symbols)."""
        return [self.device_range] + [
            (library.base, library.base + library.size) for library in self.libraries.values()
        ]

    def _launch(self, request: Launch, payload: bytes) -> tuple[Reply, bytes]:
        library = self._library(request.library)
        if library is None or request.entry not in library.entries:
            return Reply(error_code=_INVALID_DEVICE_FUNCTION), b""
        if found := host_words(payload, self.host_memory):
            self.fault = self.failed = illegal_address(request.name, found, request.arguments)
            return Reply(error_code=_ILLEGAL_ADDRESS, error=self.fault), b""

        def launch() -> None:
            self._record("launch", request.name)
            if self.runtime.cuset_kernels_on():
                arguments = ctypes.create_string_buffer(payload, len(payload))
                self.runtime.cuset_kernel_thread_run(
                    library.base + request.entry, arguments, *request.grid, *request.block, request.smem,
                    request.name.encode(),
                )  # fmt: skip

        self.order.submit(request.stream, request.nonblocking, launch)
        return Reply(), b""

    def _attribute(self, request: Attribute, _payload: bytes) -> tuple[Reply, bytes]:
        library = self._library(request.library)
        if library is None:
            return Reply(error_code=_INVALID_DEVICE_FUNCTION), b""
        library.handle.cuset_set_shared_optin(request.name.encode(), ctypes.c_long(request.value))
        return Reply(), b""

    def _symbol(self, request: Symbol, payload: bytes) -> tuple[Reply, bytes]:
        self.order.before(DEFAULT_STREAM)  # cudaMemcpyToSymbol and FromSymbol are the default stream's
        library = self._library(request.library)
        if library is None or not (0 <= request.offset and request.offset + request.n <= library.size):
            return Reply(error_code=_INVALID_SYMBOL), b""
        address = library.base + request.offset
        if request.to_device and request.src:
            self._check_device(request.src, request.n)
            ctypes.memmove(address, request.src, request.n)
            self._record("d2d", (address, request.src, request.n))
            return Reply(), b""
        if request.to_device:
            if len(payload) != request.n:
                raise HostError("a copy to a symbol whose bytes did not come with it")
            ctypes.memmove(address, payload, request.n)
            self._record("h2d", (address, payload))
            return Reply(), b""
        self._police(Access.TO_HOST, "cudaMemcpyFromSymbol")
        return Reply(), ctypes.string_at(address, request.n)

    def _last_error(self, request: LastError, _payload: bytes) -> tuple[Reply, bytes]:
        codes = [library.handle.cuset_launch_error(int(request.take)) for library in self.libraries.values()]
        return Reply(error_code=next((code for code in codes if code), 0)), b""

    def launch_failure(self) -> str:
        """A failed launch nobody consumed with cudaGetLastError, in any library ("" when none)."""
        return launch_failure(library.handle for library in self.libraries.values())

    def launches(self) -> dict[str, int]:
        """Launches so far by kernel name, over every library (a refused launch is not counted)."""
        return launch_counts(library.handle for library in self.libraries.values())

    # ------------------------------------------------------------ torch operations

    def _operator(self, request: Operator, payload: bytes) -> tuple[Reply, bytes]:
        func = _operator(request.name)
        read = host_tensors(payload, request.args, request.kwargs)
        from_host: list[Any] = []  # the host's tensors among the arguments: what a host-off replay poisons

        def host_tensor(index: int, dtype: Any, shape: list[int]) -> Any:
            from_host.append(read(index, dtype, shape))
            return from_host[-1]

        args = decode(request.args, self.tensor, host_tensor)
        kwargs = {key: decode(value, self.tensor, host_tensor) for key, value in request.kwargs.items()}
        to_host = func.name() in _TO_HOST and request.kwargs.get("device") == {"device": "cpu"}
        packet = func.overloadpacket.__name__
        access = operator_access(packet, to_host)
        self._police(access, func.name())
        if packet not in _UNORDERED:  # it reads device data: after the work its stream waits for
            self.order.before(self.torch_stream)
        if access is Access.MOVEMENT and (slot := layout_slot(func, request.args, request.kwargs)):
            # A device value in a slot that decides the result's shape, offset or a number (a
            # 0-dim tensor passed as an int): the host would read device data off the result.
            self._police(Access.TO_HOST, f"{func.name()} (device data as its {slot})")
        result = func(*args, **kwargs)
        if to_host:
            return self._to_host(result)
        if narrowing_copy(packet, args, kwargs, result):
            self._police(Access.COMPUTE, f"{func.name()} (a narrowing dtype conversion)")
        if packet not in METADATA_OPS and _holds_number(result):
            self._police(Access.TO_HOST, f"{func.name()} (a value returned to the host)")
        self._record("operator", (func, args, kwargs, result, from_host))
        return Reply(value=self._describe(result)), b""

    def _to_host(self, result: Any) -> tuple[Reply, bytes]:
        import torch

        tensor = result.contiguous()
        data = tensor.view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        dtype = str(tensor.dtype).removeprefix("torch.")
        return Reply(value={"host": 0, "dtype": dtype, "shape": list(tensor.shape)}), data

    def _describe(self, value: Any) -> Any:
        """A result for the host: each tensor by handle (an input's own handle when it is the same
        object, as in-place operations return), with its metadata and address."""
        import torch

        if isinstance(value, (tuple, list)):
            return [self._describe(item) for item in value]
        if not isinstance(value, torch.Tensor):
            if isinstance(value, float) and value != value:
                return {"float": "nan"}
            if isinstance(value, (torch.dtype, torch.device)):
                raise HostError(f"an operation returned a {type(value).__name__}")
            return value
        handle = self._handles.get(id(value))
        if handle is None or self.tensors.get(handle) is not value:
            handle = self._new_handle(value)
        return describe_tensor(handle, value)

    # ------------------------------------------------------------ trials

    def _setup(self, request: Setup, _payload: bytes) -> tuple[Reply, bytes]:
        if request.size >= len(self.sizes):
            raise HostError(f"there is no size {request.size}")
        handed = self.sizes[request.size]
        trials = handed["trials"]
        values = {key: value for key, value in handed.items() if key != "trials"}
        values.update(n_trials=len(trials), n_inputs=len(trials[0]) if trials else 0, sizes=len(self.sizes))
        blobs: list[bytes] = []
        return Reply(value=encode(values, lambda _tensor: None, blobs)), b"".join(blobs)

    def _inputs(self, request: Inputs, _payload: bytes) -> tuple[Reply, bytes]:
        if (request.size, request.trial) != self._next_trial():
            # A trial's inputs exist for the host only while its forward runs: none ahead of time,
            # none again. The harness asks in order, so only the candidate asks out of turn.
            asked = f"trial {request.trial + 1}'s inputs at size {request.size}"
            self._refuse(f"{asked} asked for out of turn")
            raise HostError(f"{asked} are not the trial that comes next")
        try:
            values = self.sizes[request.size]["trials"][request.trial]
        except (IndexError, KeyError):
            raise HostError(f"there is no trial {request.trial + 1} at size {request.size}") from None
        self.order.synchronize_device()  # what the host queued before this trial ends before it
        self.runtime.cuset_set_schedule(request.trial)
        self.runtime.cuset_set_kernels_on(1)
        import torch

        handed = [v.clone() if isinstance(v, torch.Tensor) else v for v in values]
        described = [self._describe(v) for v in handed]
        self.current = Trial(
            number=request.trial,
            start=self._snapshot(),
            rng=torch.get_rng_state(),
            launches_before=self.launches(),
            given=handed,
            drawn=list(values),
        )
        self.trials[(request.size, request.trial)] = self.current
        return Reply(value=described), b""

    def _next_trial(self) -> tuple[int, int] | None:
        """The (size, trial) whose inputs the host may ask for now: none while a trial runs."""
        if self.current is not None:
            return None
        if not self.trials:
            return (0, 0)
        size, trial = max(self.trials)
        if trial + 1 < len(self.sizes[size]["trials"]):
            return (size, trial + 1)
        return (size + 1, 0) if size + 1 < len(self.sizes) else None

    def _outputs(self, request: Outputs, _payload: bytes) -> tuple[Reply, bytes]:
        if self.current is None:
            raise HostError("outputs of a trial that did not start")
        self.order.synchronize_device()  # forward has returned: the harness waits for the device
        self.current.outputs = [
            decode(value, self.tensor, lambda *_: (_ for _ in ()).throw(HostError("a host tensor as an output")))
            for value in request.values
        ]
        # An output is what forward returned, as it was then: a later write (another trial, a hook,
        # a thread) changes the tensor, not the judged values.
        self.current.returned = [_copy_value(v) for v in self.current.outputs]
        self.current.aliased = aliased_pairs(self.current.outputs, self.current.given)
        self.current.changed = changed_inputs(self.current.drawn, self.current.given)
        self.current.launch_failure = self.launch_failure()
        self.current.launches_after = self.launches()
        self.current = None
        return Reply(), b""

    def _record(self, kind: str, what: Any) -> None:
        if self.current is not None:
            self.current.log.append((kind, what))

    def _police(self, access: Access, what: str) -> None:
        """Keep what the policies forbid: device data reaching the host once trials have begun, and
        torch compute during a trial's forward (also counted by name for a ``mixed`` pass)."""
        if access is Access.TO_HOST and self.trials:
            kept = self.transfers
        elif access is Access.COMPUTE and self.current is not None:
            self.torch_ops[what] = self.torch_ops.get(what, 0) + 1
            kept = self.computes
        else:
            return
        if len(kept) < MAX_VIOLATIONS:
            kept.append(violation(access, what, None if self.current is None else self.current.number))

    def _refuse(self, what: str) -> None:
        """Keep a request for trial data the host may not have now (both policies forbid it)."""
        if len(self.transfers) < MAX_VIOLATIONS:
            self.transfers.append(
                violation(Access.TRIAL_DATA, what, None if self.current is None else self.current.number)
            )

    def _snapshot(self) -> list[tuple[Any, Any]]:
        """Every live piece of device memory with a copy of its bytes."""
        import torch

        seen, saved = set(), []
        for tensor in [*self.tensors.values(), *self.allocations.values()]:
            storage = tensor.untyped_storage()
            if storage.data_ptr() in seen or not storage.nbytes():
                continue
            seen.add(storage.data_ptr())
            whole = torch.empty(0, dtype=torch.uint8).set_(storage)
            saved.append((whole, whole.clone()))
        return saved

    def launches_at(self, size: int) -> dict[str, int]:
        """Launches by kernel name during the trials at ``size``."""
        trials = [self.trials[key] for key in sorted(self.trials) if key[0] == size]
        if not trials:
            return {}
        before, after = trials[0].launches_before, trials[-1].launches_after or self.launches()
        return {name: count - before.get(name, 0) for name, count in after.items() if count > before.get(name, 0)}

    def output_values(self, size: int) -> list[list[Any]] | None:
        """Each trial's outputs at ``size`` as forward returned them, None when a trial named none."""
        trials = sorted(key for key in self.trials if key[0] == size)
        values = []
        for key in trials:
            returned = self.trials[key].returned
            if returned is None:
                return None
            values.append(returned)
        return values

    def draw_replayed_trial(self, size: int) -> int:
        """The trial at ``size`` whose kernels-off replay the judge gets, drawn now that the host is
        gone (so no trial of the host's could be the only honest one)."""
        trials = sorted(trial for (s, trial) in self.trials if s == size)
        return trials[secrets.randbelow(len(trials))] if trials else 0

    def replay(self, size: int, trial: int, host_off: bool = False) -> list[Any]:
        """Trial ``trial`` at ``size`` again from the device memory it started with, every recorded
        request but the launches: the outputs it leaves. Without ``host_off`` it keeps what torch
        computed (``Trial.torch_made``). ``host_off`` poisons what the host copied to the device
        during the trial as well (copies, and host tensors operations took): what still matches the
        reference then came from neither kernels nor the host. ``ReplayError`` when it cannot
        complete (an operation raises, or makes another shape than the trial's): a pass cannot stand
        on a replay that did not run."""
        import torch

        record = self.trials.get((size, trial))
        if record is None or record.outputs is None:
            raise ReplayError(f"trial {trial + 1} at size {size} did not finish, so it cannot be replayed")
        for whole, saved in record.start:
            whole.copy_(saved)
        torch.set_rng_state(record.rng)
        self.runtime.cuset_set_kernels_on(0)
        try:
            for kind, what in record.log:
                made = _replay_one(kind, what, host_off)
                if made is not None and not host_off and what[0].overloadpacket.__name__ not in DATA_MOVEMENT_OPS:
                    record.keep_torch_made(what[0].name(), made)
        except Exception as exc:  # noqa: BLE001 - whatever stops the replay fails the pass closed
            raise ReplayError(f"{type(exc).__name__}: {str(exc)[:200]}") from None
        finally:
            self.runtime.cuset_set_kernels_on(1)
        return [_copy_value(v) for v in record.outputs]


def describe_tensor(handle: int, tensor: Any) -> dict[str, Any]:
    return {
        "t": handle,
        "shape": list(tensor.shape),
        "stride": list(tensor.stride()),
        "offset": tensor.storage_offset(),
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "ptr": tensor.data_ptr(),
    }


def _replay_one(kind: str, what: Any, host_off: bool) -> Any:
    """Replay one recorded request; an operator's result, None for the others."""
    import torch

    if kind == "launch":
        return
    if kind == "malloc":
        what.fill_(0xFF)
    elif kind == "h2d":
        address, data = what
        if host_off:
            ctypes.memset(address, 0xFF, len(data))
        else:
            ctypes.memmove(address, data, len(data))
    elif kind == "d2d":
        dst, src, n = what
        ctypes.memmove(dst, src, n)
    elif kind == "memset":
        dst, value, n = what
        ctypes.memset(dst, value, n)
    elif kind == "operator":
        func, args, kwargs, result, from_host = what
        if host_off:
            for tensor in from_host:  # poisoned for good: the host-off replay is a trial's last
                if tensor.numel():
                    tensor.view(-1).view(torch.uint8).fill_(0xFF)
        again = func(*args, **kwargs)
        for made, now in zip(_flat(result), _flat(again)):
            if isinstance(made, torch.Tensor) and made is not now:
                if made.shape != now.shape:
                    raise ValueError("the replay made another shape")
                made.copy_(now)
        return again
    return None


def _holds_number(value: Any) -> bool:
    """Whether an operator's result holds a Python number or bool (read from device data)."""
    if isinstance(value, (tuple, list)):
        return any(_holds_number(item) for item in value)
    return isinstance(value, (bool, int, float, complex))


def _flat(value: Any) -> list[Any]:
    if isinstance(value, (tuple, list)):
        return [item for element in value for item in _flat(element)]
    return [value]


def _copy_value(value: Any) -> Any:
    import torch

    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _operator(name: str) -> Any:
    """``aten::add.Tensor`` as torch's operator; only aten's (a GPU runs no other library's)."""
    import torch

    namespace, _, rest = name.partition("::")
    packet_name, _, overload = rest.partition(".")
    if namespace != "aten" or not packet_name.isidentifier():
        raise HostError(f"{name[:80]} is not an operator of torch that runs on the device here")
    packet = getattr(torch.ops.aten, packet_name, None)
    op = getattr(packet, overload or "default", None) if packet is not None else None
    if op is None:
        raise HostError(f"torch has no operator {name[:80]}")
    return op


def _start_kernel_thread(runtime: ctypes.CDLL, kernel_filter: bytes) -> None:
    """Start the runtime's kernel thread under ``kernel_filter``; no kernel runs without it."""
    runtime.cuset_kernel_thread_run.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, *(ctypes.c_uint,) * 6, ctypes.c_size_t, ctypes.c_char_p,
    ]  # fmt: skip
    runtime.cuset_kernel_thread_start.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    failed = runtime.cuset_kernel_thread_start(kernel_filter, len(kernel_filter))
    if failed:
        raise RuntimeError(f"the device process could not contain its kernels: {os.strerror(failed)}")


def _load(name: str, data: bytes) -> Library:
    """The library ``data`` loaded with none of its code run, its entries and fault handler known."""
    entries = elf.launch_entries(data)
    copy_fd = os.memfd_create(name)
    os.write(copy_fd, elf.without_initialisers(data))
    handle = ctypes.CDLL(f"/proc/self/fd/{copy_fd}")
    anchor = ctypes.cast(handle.cuset_launch_report, ctypes.c_void_p).value
    runtime_base = ctypes.CDLL(None).cuset_base_of
    runtime_base.restype = ctypes.c_size_t
    runtime_base.argtypes = [ctypes.c_void_p]
    handle.cuset_install_fault_handler()
    return Library(handle=handle, base=runtime_base(anchor), entries=entries, size=elf.mapped_size(data))
