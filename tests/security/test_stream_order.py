"""A GPU's stream order on the CPU tier (issue 47, item 4): work on a stream other than the default
one runs concurrently on a GPU, so a reader that nothing orders after it may see the old data. The
device process defers that work until something synchronises it (``cpu/device/streams.py``), so a
candidate that forgets the synchronisation reads stale data (the poison of fresh memory) and fails
as it may on a GPU, while correct multi-stream code gets its order: a stream or device sync, an
event waited on or synchronised, a polling query, the legacy default stream's implicit order with
blocking streams, torch's current stream under a guard, ``torch.cuda.synchronize()``, and the end
of forward.

Every candidate adds two vectors in two steps, a writer (a kernel or a copy) into a scratch tensor
and a reader that moves it to the output; before this rule every attack here passed tier 2. Runs
behind the device boundary (the default). Marked slow: each builds an extension with g++.
"""

from __future__ import annotations

import gpu_rule_cases
import pytest

from cuset_core.verify.execution.library_cache import LibraryCache
from cuset_core.verify.result import Verdict, VerifyResult

pytestmark = pytest.mark.slow

CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

__global__ void copy_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i];
}

static int blocks(int n) { return (n + 255) / 256; }
static cudaStream_t side_stream(unsigned flags) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, flags);
    return s;
}
#define WRITE(stream) add_kernel<<<blocks(n), 256, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(), tmp.data_ptr<float>(), n)
#define READ(stream) copy_kernel<<<blocks(n), 256, 0, stream>>>(tmp.data_ptr<float>(), out.data_ptr<float>(), n)
#define SETUP auto tmp = torch::empty_like(a); auto out = torch::empty_like(a); int n = a.numel()

// The attack as found: the sums on a non-blocking stream, read on the default stream, no sync.
torch::Tensor unsynced(torch::Tensor a, torch::Tensor b) {
    SETUP; cudaStream_t s = side_stream(cudaStreamNonBlocking);
    WRITE(s); READ(0);
    return out;
}
// Another road: the writer is an async copy of the sums on the non-blocking stream.
torch::Tensor unsynced_copy(torch::Tensor a, torch::Tensor b) {
    SETUP; cudaStream_t s = side_stream(cudaStreamNonBlocking);
    WRITE(0);
    cudaMemcpyAsync(out.data_ptr<float>(), tmp.data_ptr<float>(), n * sizeof(float), cudaMemcpyDeviceToDevice, s);
    copy_kernel<<<blocks(n), 256>>>(out.data_ptr<float>(), tmp.data_ptr<float>(), n);
    return tmp;
}
// Another order: writer and reader on two non-blocking streams, nothing between them.
torch::Tensor two_streams(torch::Tensor a, torch::Tensor b) {
    SETUP; cudaStream_t s1 = side_stream(cudaStreamNonBlocking), s2 = side_stream(cudaStreamNonBlocking);
    WRITE(s1); READ(s2);
    cudaDeviceSynchronize();
    return out;
}
// Another order: the event is recorded before the writer, so waiting on it waits for nothing.
torch::Tensor event_too_early(torch::Tensor a, torch::Tensor b) {
    SETUP; cudaStream_t s = side_stream(cudaStreamNonBlocking);
    cudaEvent_t e; cudaEventCreate(&e);
    cudaEventRecord(e, s); WRITE(s);
    cudaStreamWaitEvent(0, e, 0); READ(0);
    return out;
}
// A query whose answer nobody checks synchronises nothing.
torch::Tensor query_ignored(torch::Tensor a, torch::Tensor b) {
    SETUP; cudaStream_t s = side_stream(cudaStreamNonBlocking);
    WRITE(s); cudaStreamQuery(s); READ(0);
    return out;
}
// The sums on a torch pool stream (non-blocking), read by torch's clone on the default stream.
torch::Tensor pool_then_torch(torch::Tensor a, torch::Tensor b) {
    SETUP; auto s = at::cuda::getStreamFromPool();
    WRITE(s.stream());
    return tmp.clone();
}
// Returns the scratch tensor while its kernel is still pending (Python reads it next).
torch::Tensor write_only(torch::Tensor a, torch::Tensor b) {
    SETUP; cudaStream_t s = side_stream(cudaStreamNonBlocking);
    WRITE(s);
    return tmp;
}
torch::Tensor read_only(torch::Tensor tmp) {
    auto out = torch::empty_like(tmp); int n = tmp.numel();
    READ(0);
    return out;
}

// Honest: the same with each way of synchronising.
torch::Tensor stream_synced(torch::Tensor a, torch::Tensor b) {
    SETUP; cudaStream_t s = side_stream(cudaStreamNonBlocking);
    WRITE(s); cudaStreamSynchronize(s); READ(0);
    return out;
}
torch::Tensor device_synced(torch::Tensor a, torch::Tensor b) {
    SETUP; cudaStream_t s = side_stream(cudaStreamNonBlocking);
    WRITE(s); cudaDeviceSynchronize(); READ(0);
    return out;
}
torch::Tensor event_waited(torch::Tensor a, torch::Tensor b) {
    SETUP; cudaStream_t s1 = side_stream(cudaStreamNonBlocking), s2 = side_stream(cudaStreamNonBlocking);
    cudaEvent_t e; cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    WRITE(s1); cudaEventRecord(e, s1); cudaStreamWaitEvent(s2, e, 0); READ(s2);
    cudaStreamSynchronize(s2);
    return out;
}
torch::Tensor event_synchronized(torch::Tensor a, torch::Tensor b) {
    SETUP; cudaStream_t s = side_stream(cudaStreamNonBlocking);
    cudaEvent_t e; cudaEventCreate(&e);
    WRITE(s); cudaEventRecord(e, s); cudaEventSynchronize(e); READ(0);
    return out;
}
torch::Tensor polled(torch::Tensor a, torch::Tensor b) {
    SETUP; cudaStream_t s = side_stream(cudaStreamNonBlocking);
    WRITE(s);
    while (cudaStreamQuery(s) == cudaErrorNotReady) {}
    READ(0);
    return out;
}
// A blocking stream (cudaStreamCreate) and the legacy default stream wait for each other.
torch::Tensor blocking_stream(torch::Tensor a, torch::Tensor b) {
    SETUP; cudaStream_t s; cudaStreamCreate(&s);
    WRITE(s); READ(0);
    return out;
}
// torch's current stream under a guard: the kernels and torch's clone run on it in order.
torch::Tensor guarded_pool_stream(torch::Tensor a, torch::Tensor b) {
    SETUP; at::cuda::CUDAStreamGuard guard(at::cuda::getStreamFromPool());
    WRITE(at::cuda::getCurrentCUDAStream());
    auto copy = tmp.clone();
    copy_kernel<<<blocks(n), 256, 0, at::cuda::getCurrentCUDAStream().stream()>>>(copy.data_ptr<float>(), out.data_ptr<float>(), n);
    at::cuda::getCurrentCUDAStream().synchronize();
    return out;
}
"""
FUNCTIONS = [
    "unsynced",
    "unsynced_copy",
    "two_streams",
    "event_too_early",
    "query_ignored",
    "pool_then_torch",
    "write_only",
    "read_only",
    "stream_synced",
    "device_synced",
    "event_waited",
    "event_synchronized",
    "polled",
    "blocking_stream",
    "guarded_pool_stream",
]
SIGNATURES = "\n".join(
    f"torch::Tensor {name}(torch::Tensor tmp);"
    if name == "read_only"
    else f"torch::Tensor {name}(torch::Tensor a, torch::Tensor b);"
    for name in FUNCTIONS
)


def candidate(forward: str) -> str:
    return gpu_rule_cases.candidate("stream_order_ext", CUDA, SIGNATURES, FUNCTIONS, forward)


def tier2(forward: str, libraries: LibraryCache) -> VerifyResult:
    return gpu_rule_cases.tier2(candidate(forward), libraries)


# ---------------------------------------------------------------- the attack and its variations


@pytest.mark.parametrize(
    "function",
    [
        "unsynced",  # the attack as found
        "unsynced_copy",  # another road: an async copy writes
        "two_streams",  # another order: the reader on a second non-blocking stream
        "event_too_early",  # another order: the event recorded before the writer
        "query_ignored",  # a query is no synchronisation
        "pool_then_torch",  # another reader: torch's operator on the default stream
    ],
)
def test_a_reader_nothing_orders_after_a_non_blocking_streams_writer_reads_stale_data(libraries, function):
    result = tier2(f"        return ext.{function}(a, b)", libraries)
    assert result.verdict is Verdict.VALUE_MISMATCH, (result.verdict, result.reason, result.log[-2000:])
    assert "nan" in result.reason, result.reason  # the reader saw the poison of fresh memory


def test_the_reader_in_another_extension_call_sees_stale_data_without_a_sync(libraries):
    # Another layer: the writer's binding returns with its kernel pending; Python calls the reader.
    result = tier2("        return ext.read_only(ext.write_only(a, b))", libraries)
    assert result.verdict is Verdict.VALUE_MISMATCH, (result.verdict, result.reason, result.log[-2000:])


# ---------------------------------------------------------------- honest multi-stream code


@pytest.mark.parametrize(
    "forward",
    [
        "        return ext.stream_synced(a, b)",
        "        return ext.device_synced(a, b)",
        "        return ext.event_waited(a, b)",
        "        return ext.event_synchronized(a, b)",
        "        return ext.polled(a, b)",
        "        return ext.blocking_stream(a, b)",
        "        return ext.guarded_pool_stream(a, b)",
        # The end of forward synchronises, as the harness does on a GPU.
        "        return ext.write_only(a, b)",
        "        tmp = ext.write_only(a, b)\n        torch.cuda.synchronize()\n        return ext.read_only(tmp)",
    ],
)
def test_correctly_synchronised_streams_pass(libraries, forward):
    result = tier2(forward, libraries)
    assert result.verdict is Verdict.PASS, (result.verdict, result.reason, result.log[-2000:])
