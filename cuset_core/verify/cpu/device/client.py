"""The host side of tier 2's device boundary: device tensors that say "cuda" and hold no data.

In the candidate's host process a device tensor (:class:`DeviceTensor`) is a torch wrapper
subclass: its shape, strides, dtype and device are real, its data lives in the device process.
Every torch operation on one (from the candidate's Python, or from its C++ binding through the
torch bridge) is sent through the port and runs there (``__torch_dispatch__``), from any thread;
factories and copies that ask for ``device="cuda"`` go there too (:class:`DeviceFactories`, the
mode the harness enters). ``data_ptr()`` is the device address, which the host cannot dereference
(the range is reserved here, PROT_NONE): host code that reads device memory faults, as on a GPU.

The host is the candidate's: nothing here is trusted, it only lets honest code run.
"""

from __future__ import annotations

import ctypes
import functools
import json
import threading
import weakref
from typing import Any

from cuset_core.verify.cpu.device.protocol import encode, host_tensors
from cuset_core.verify.execution.disguise import as_if

_released: list[int] = []
_lock = threading.Lock()
_port: ctypes.CDLL | None = None


class DeviceError(RuntimeError):
    """What the device process refused or what failed there (CUDA's errors surface the same way)."""


def open_port(runtime: ctypes.CDLL, fd: int) -> None:
    """Send this process's device work through ``fd`` from now on (the C++ runtime API too)."""
    global _port
    runtime.cuset_register_fake_cuda_guard()
    runtime.cuset_port_open(fd)
    runtime.cuset_port_request.restype = ctypes.c_int
    _port = runtime
    _cuda_allocation_helpers()
    _cuda_synchronize()


def _cuda_allocation_helpers() -> None:
    """torch's CUDA allocation helpers that call the CUDA backend directly (inductor's
    ``_empty_strided_cuda``, which KernelBench answers use) allocate on the device here, as on a GPU,
    instead of failing for want of a CUDA build."""
    import torch

    def empty_strided_cuda(size: Any, stride: Any, dtype: Any) -> Any:
        return torch.empty_strided(size, stride, dtype=dtype, device="cuda")

    torch._C._dynamo.guards._empty_strided_cuda = empty_strided_cuda  # type: ignore[attr-defined]


def _cuda_synchronize() -> None:
    """``torch.cuda.synchronize()`` waits for the device process's pending work on every stream, as
    ``cudaDeviceSynchronize`` does."""
    import torch

    def synchronize(device: Any = None) -> None:
        request({"op": "stream", "action": "synchronize_device"})

    torch.cuda.synchronize = as_if(synchronize, "torch.cuda", "synchronize")


def request(header: dict[str, Any], payload: bytes = b"") -> tuple[Any, bytes]:
    """Send one request; its reply's ``value`` and payload. ``DeviceError`` when it failed."""
    assert _port is not None, "the port is not open"
    with _lock:
        if _released:
            header = {**header, "release": list(_released)}
            _released.clear()
    data = json.dumps(header).encode()
    reply_header, reply_len = ctypes.c_void_p(), ctypes.c_size_t()
    reply_payload, payload_len = ctypes.c_void_p(), ctypes.c_size_t()
    _port.cuset_port_request(
        data,
        ctypes.c_size_t(len(data)),
        payload,
        ctypes.c_size_t(len(payload)),
        ctypes.byref(reply_header),
        ctypes.byref(reply_len),
        ctypes.byref(reply_payload),
        ctypes.byref(payload_len),
    )
    try:
        reply = json.loads(ctypes.string_at(reply_header, reply_len.value) or b"{}")
        extra = ctypes.string_at(reply_payload, payload_len.value) if payload_len.value else b""
    finally:
        _port.cuset_port_release(reply_header)
        _port.cuset_port_release(reply_payload)
    if reply.get("error"):
        raise DeviceError(reply["error"])
    return reply.get("value"), extra


@functools.cache
def device_tensor_class() -> type:
    """The device tensor type, a torch wrapper subclass (made on first use: it needs torch)."""
    import torch

    class DeviceTensor(torch.Tensor):
        handle: int
        address: int

        @staticmethod
        def __new__(cls, described: dict[str, Any]) -> Any:
            tensor = torch.Tensor._make_wrapper_subclass(
                cls,
                described["shape"],
                strides=described["stride"],
                storage_offset=described["offset"],
                dtype=getattr(torch, described["dtype"]),
                device=torch.device("cuda", 0),
            )
            tensor.handle = described["t"]
            tensor.address = described["ptr"]
            weakref.finalize(tensor, _release, described["t"])
            return tensor

        def data_ptr(self) -> int:
            return self.address

        def __repr__(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
            return f"tensor(<on the device>, shape={tuple(self.shape)}, dtype={self.dtype}, device='cuda:0')"

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # type: ignore[override]
            return run_remotely(func, args, kwargs or {})

    # Named as a GPU's tensors are: ``type(x).__name__`` tells a candidate nothing.
    DeviceTensor.__name__ = DeviceTensor.__qualname__ = "Tensor"
    DeviceTensor.__module__ = "torch"
    return DeviceTensor


def _release(handle: int) -> None:
    with _lock:
        _released.append(handle)


def _handle_of(value: Any) -> int | None:
    handle: int | None = getattr(value, "handle", None) if isinstance(value, device_tensor_class()) else None
    return handle


_alive: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def wrap(value: Any, payload: bytes = b"") -> Any:
    """A reply's value as the host sees it: device tensors by handle (the same object for a handle
    the host still holds), host tensors from the payload."""
    return _wrapped(value, host_tensors(payload, value))


def _wrapped(value: Any, read: Any) -> Any:
    if isinstance(value, list):
        return [_wrapped(item, read) for item in value]
    if not isinstance(value, dict):
        return value
    if "t" in value:
        found = _alive.get(value["t"])
        if found is None:
            found = device_tensor_class()(value)
            _alive[value["t"]] = found
        return found
    if set(value) == {"host", "dtype", "shape"}:
        import torch

        return read(value["host"], getattr(torch, value["dtype"]), value["shape"])
    if "float" in value:
        return float(value["float"])
    if "map" in value:
        return {key: _wrapped(item, read) for key, item in value["map"].items()}
    return value


def run_remotely(func: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """Run a torch operator in the device process; results as :func:`wrap` gives them. An operator
    of another library than aten (``torch.library``, ``TORCH_LIBRARY``) runs its CUDA kernel here,
    in the host, as a GPU's host runs it: the operations that kernel calls on device tensors come
    back through here."""
    if func.namespace != "aten":
        return _custom_operator(func, args, kwargs)
    blobs: list[bytes] = []
    header = {
        "op": "operator",
        "name": func.name(),
        "args": encode(list(args), _handle_of, blobs),
        "kwargs": {key: encode(value, _handle_of, blobs) for key, value in kwargs.items()},
    }
    value, payload = request(header, b"".join(blobs))
    result = wrap(value, payload)
    if func._schema.returns and len(func._schema.returns) > 1 and isinstance(result, list):
        return tuple(result)
    return result


# The kernels of a custom operator that take CUDA tensors, in the order the dispatcher prefers them.
_CUDA_KEYS = ("CUDA", "CompositeExplicitAutograd")


def _custom_operator(func: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    import torch

    for key in _CUDA_KEYS:
        if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), key):
            # Called from a dispatch mode, the kernel runs with that mode off: factories asking for
            # the device must still reach it.
            with device_factories():
                return func._op_dk(getattr(torch._C.DispatchKey, key), *args, **kwargs)
    raise DeviceError(f"{func.name()[:80]} has no kernel for CUDA tensors (a GPU could not run it either)")


def _is_cuda(value: Any) -> bool:
    import torch

    if isinstance(value, str):
        return value.startswith("cuda")
    return isinstance(value, torch.device) and value.type == "cuda"


def device_factories() -> Any:
    """The dispatch mode that sends operations asking for ``device="cuda"`` (factories, copies to the
    device) to the device process; everything else runs where it would."""
    return _device_factories_class()()


@functools.cache
def _device_factories_class() -> type:
    """:func:`device_factories`' mode type (made once, on first use: it needs torch)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class DeviceFactories(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False  # see fallback.FallbackMonitor: no torch._dynamo import for a guard

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            device_class = device_tensor_class()
            if any(issubclass(t, device_class) for t in types_) or _is_cuda(kwargs.get("device")):
                return run_remotely(func, args, kwargs)
            return func(*args, **kwargs)

    return DeviceFactories


def trial_inputs(size: int, trial: int) -> list[Any]:
    """Start trial ``trial`` at ``size``: its inputs, as device tensors."""
    value, _ = request({"op": "inputs", "size": size, "trial": trial})
    return wrap(value)


def trial_outputs(outputs: list[Any]) -> None:
    """Name the trial's outputs (the device process keeps them; a host value goes as it is)."""
    request({"op": "outputs", "values": encode(outputs, _handle_of, [])})


def library_loaded(path: str) -> None:
    """Tell the device process the host loaded this extension library (it must have its own copy)."""
    request({"op": "load", "library": path.rsplit("/", 1)[-1]})


def setup(size: int) -> dict[str, Any]:
    """What the candidate needs at ``size`` besides the trials' inputs (see ``protocol.Setup``)."""
    value, payload = request({"op": "setup", "size": size})
    return wrap(value, payload)
