"""What crosses tier 2's device boundary: frames on the socket between the candidate's host process
and the device process, the requests and replies they carry, and torch values encoded for them.

A frame is a u32 header length, a u64 payload length, the header (JSON) and the payload (raw
bytes: what a copy moves, a launch's bound arguments, host tensors an operation takes). The host
sends a request and waits for its reply; the C++ side of the port (``runtime/device_port.cpp``)
writes the same frames and reads the replies' ``error_code`` and ``ptr``.

The device process reads everything the host sends as hostile: a header that is not one of
:data:`Request` is the candidate's error, and so is any value :func:`decode` refuses.
"""

from __future__ import annotations

import json
import math
import socket
import struct
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

_FRAME = struct.Struct("<IQ")
MAX_HEADER_BYTES = 1 << 20
MAX_PAYLOAD_BYTES = 1 << 31


class FrameError(Exception):
    """The other side closed the socket or sent a frame no side writes."""


def send_frame(sock: socket.socket, header: bytes, payload: bytes | memoryview = b"") -> None:
    sock.sendall(_FRAME.pack(len(header), len(payload)) + header)
    if payload:
        sock.sendall(payload)


def receive_frame(sock: socket.socket) -> tuple[bytes, bytes]:
    """One frame's header and payload; ``FrameError`` when the socket closed or the lengths are absurd."""
    header_len, payload_len = _FRAME.unpack(_exactly(sock, _FRAME.size))
    if header_len > MAX_HEADER_BYTES or payload_len > MAX_PAYLOAD_BYTES:
        raise FrameError(f"a frame of {header_len} + {payload_len} bytes")
    return _exactly(sock, header_len), _exactly(sock, payload_len)


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise FrameError("the other side closed the socket")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ---------------------------------------------------------------- requests


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")
    release: list[int] = Field(default_factory=list, description="handles the host no longer holds")


class _OnStream(_Request):
    """Work the host puts on a stream: ``stream`` is its handle (0: the legacy default stream), and
    ``nonblocking`` whether it was created ``cudaStreamNonBlocking`` (``streams.StreamOrder``)."""

    stream: int = Field(0, ge=0)
    nonblocking: bool = False


class Malloc(_Request):
    op: Literal["malloc"]
    bytes: int = Field(ge=0)


class Free(_Request):
    op: Literal["free"]
    ptr: int


class Copy(_OnStream):
    """cudaMemcpy between two addresses; ``h2d`` carries ``n`` bytes, ``d2h`` gets them back."""

    op: Literal["h2d", "d2h", "d2d"]
    dst: int
    src: int
    n: int = Field(ge=0)


class Memset(_OnStream):
    op: Literal["memset"]
    dst: int
    value: int
    n: int = Field(ge=0)


class Launch(_OnStream):
    """A kernel launch: the launch site's entry in ``library`` (an offset into it) and, as the
    payload, its bound arguments (``arguments``: where each starts in it)."""

    op: Literal["launch"]
    library: str
    entry: int
    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int = Field(ge=0)
    # Where each argument starts in the payload, as the host says: only to name an argument the
    # device process refuses (containment.host_words reads every word whatever this says).
    arguments: list[int] = Field(default_factory=list, max_length=4096)


class Attribute(_Request):
    """cudaFuncSetAttribute's dynamic shared memory opt-in (bytes) for the kernel ``name``."""

    op: Literal["attribute"]
    library: str
    name: str
    value: int = Field(ge=0)


class Symbol(_Request):
    """cudaMemcpyToSymbol (payload: the bytes, or ``src``: a device address to copy them from) or
    cudaMemcpyFromSymbol (reply payload)."""

    op: Literal["symbol"]
    library: str
    offset: int
    n: int = Field(ge=0)
    to_device: bool
    src: int = 0


class StreamCall(_Request):
    """A synchronisation, an event's record or a query, named by the ``streams.StreamOrder`` method
    it calls: of ``stream`` (0: the legacy default stream), ``event``, or both (``wait``:
    cudaStreamWaitEvent and cudaEventSynchronize; ``current``: torch's current stream, which the
    binding's torch operations run on)."""

    op: Literal["stream"]
    action: Literal["synchronize", "synchronize_device", "record", "wait", "query", "query_event", "current"]
    stream: int = Field(0, ge=0)
    event: int = Field(0, ge=0)


class LastError(_Request):
    """cudaGetLastError (``take``) or cudaPeekAtLastError."""

    op: Literal["last_error"]
    take: bool


class Load(_Request):
    """The host loaded an extension library: the device process names its own copy of it."""

    op: Literal["load"]
    library: str


class Operator(_Request):
    """A torch operator on device tensors: ``name`` as ``aten::add.Tensor``; ``args`` and ``kwargs``
    encoded (:func:`encode`), host tensors among them in the payload."""

    op: Literal["operator"]
    name: str
    args: list[Any]
    kwargs: dict[str, Any]


class Inputs(_Request):
    """The inputs of a trial (``size`` 0: the reduced sizes, 1: the second size) as device tensors,
    and whether this starts the trial: the device process then records what the host asks until
    ``Outputs``."""

    op: Literal["inputs"]
    size: int = Field(ge=0, le=1)
    trial: int = Field(ge=0)


class Outputs(_Request):
    """The outputs the candidate's forward returned for the trial that ``Inputs`` started (encoded)."""

    op: Literal["outputs"]
    values: list[Any]


class Setup(_Request):
    """What the host needs at ``size`` besides the trials' inputs: the init inputs (and a ``.cu``
    candidate's binding) and how many trials and inputs there are."""

    op: Literal["setup"]
    size: int = Field(ge=0, le=1)


class Release(_Request):
    """Nothing but the ``release`` list: what a host sends when it drops tensors at its end."""

    op: Literal["release"]


Request = Annotated[
    Malloc
    | Free
    | Copy
    | Memset
    | Launch
    | Attribute
    | Symbol
    | StreamCall
    | LastError
    | Load
    | Operator
    | Setup
    | Inputs
    | Outputs
    | Release,
    Field(discriminator="op"),
]
REQUEST: TypeAdapter[Request] = TypeAdapter(Request)


class Reply(BaseModel):
    """The device process's answer. ``error_code`` is a cudaError_t value for the runtime API (0:
    success); ``error`` a message for the host's Python, raised there as the candidate's error."""

    error_code: int = 0
    error: str | None = None
    ptr: int = 0
    value: Any = None


def reply_bytes(reply: Reply) -> bytes:
    return reply.model_dump_json(exclude_defaults=True).encode()


# ---------------------------------------------------------------- values


class Refused(ValueError):
    """A value that cannot cross the boundary (a generator, an object of the candidate's own)."""


def encode(value: Any, tensor_handle: Callable[[Any], int | None], host_blobs: list[bytes]) -> Any:
    """``value`` as JSON: a device tensor as ``{"t": handle}`` (``tensor_handle`` gives it, or None for
    a tensor of the host), a host tensor as ``{"host": i, ...}`` with its bytes appended to
    ``host_blobs``, torch's dtypes, devices, layouts and memory formats by name."""
    import torch

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, complex):
        return {"complex": [value.real, value.imag]}
    if isinstance(value, (list, tuple)):
        return [encode(item, tensor_handle, host_blobs) for item in value]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {"map": {key: encode(item, tensor_handle, host_blobs) for key, item in value.items()}}
    if isinstance(value, torch.Tensor):
        handle = tensor_handle(value)
        if handle is not None:
            return {"t": handle}
        host = value.detach().contiguous()
        host_blobs.append(host.view(-1).view(torch.uint8).numpy().tobytes() if host.numel() else b"")
        return {"host": len(host_blobs) - 1, "dtype": str(host.dtype).removeprefix("torch."), "shape": list(host.shape)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": value.type}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    raise Refused(f"a {type(value).__name__} cannot be passed to a torch operation on the device")


def decode(value: Any, tensor: Callable[[int], Any], host_tensor: Callable[[int, Any, list[int]], Any]) -> Any:
    """The inverse of :func:`encode` on the device side: ``tensor(handle)`` and ``host_tensor(i,
    dtype, shape)`` give tensors; anything unexpected raises ``Refused``."""
    import torch

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [decode(item, tensor, host_tensor) for item in value]
    if isinstance(value, dict) and len(value) == 1:
        ((key, item),) = value.items()
        if key == "t" and isinstance(item, int):
            return tensor(item)
        if key == "map" and isinstance(item, dict):
            return {name: decode(entry, tensor, host_tensor) for name, entry in item.items()}
        if key == "float" and item in ("nan", "inf", "-inf"):
            return float(item)
        if key == "complex" and isinstance(item, list) and len(item) == 2:
            return complex(*item)
        if key == "dtype":
            return _torch_attribute(item, torch.dtype)
        if key == "device" and item in ("cuda", "cpu", "meta"):
            return torch.device("cpu" if item == "cuda" else item)
        if key == "layout":
            return _torch_attribute(item, torch.layout)
        if key == "memory_format":
            return _torch_attribute(item, torch.memory_format)
    if isinstance(value, dict) and set(value) == {"host", "dtype", "shape"}:
        return host_tensor(value["host"], _torch_attribute(value["dtype"], torch.dtype), value["shape"])
    raise Refused(f"not a value a torch operation takes: {json.dumps(value)[:120]}")


def _torch_attribute(name: Any, kind: type) -> Any:
    import torch

    found = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not isinstance(found, kind):
        raise Refused(f"no torch {kind.__name__} called {str(name)[:40]}")
    return found


def host_tensors(payload: bytes, *values: Any) -> Callable[[int, Any, list[int]], Any]:
    """The reader of the host tensors that ``values`` (encoded) name, each ``(index, dtype, shape)``,
    their bytes in the payload in index order; ``Refused`` when they do not add up to it."""
    import math

    import torch

    described: list[tuple[int, Any, list[int]]] = []

    def walk(value: Any) -> None:
        if isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            if set(value) == {"host", "dtype", "shape"}:
                described.append((value["host"], value["dtype"], value["shape"]))
            else:
                for item in value.values():
                    walk(item)

    for value in values:
        walk(value)
    spans: dict[int, tuple[int, int]] = {}
    at = 0
    for index, dtype_name, shape in sorted(described, key=lambda d: d[0]):
        dtype = _torch_attribute(dtype_name, torch.dtype)
        if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise Refused("a host tensor of no shape")
        n = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
        spans[index] = (at, n)
        at += n
    if at != len(payload):
        raise Refused("the host tensors' bytes do not add up")

    def read(index: int, dtype: Any, shape: list[int]) -> Any:
        start, n = spans[index]
        flat = torch.frombuffer(bytearray(payload[start : start + n]), dtype=torch.uint8) if n else None
        return (flat if flat is not None else torch.empty(0, dtype=torch.uint8)).view(dtype).reshape(shape)

    return read
