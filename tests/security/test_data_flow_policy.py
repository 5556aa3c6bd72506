"""The data-flow policy of tier 2 (DESIGN.md §4, ``cuset_core/verify/policy.py``), enforced by the
device process on every operation, for every trial, whatever the values look like afterwards.

Issue 47's classes, each with the attack as found and variations written apart from it (another
road, another layer, another trial, another order). Each test fails if its attack works:

1. Host computation reaches the outputs through a kernel: a device-to-host copy in Python
   (``.cpu()``), in the binding (``cudaMemcpy``), through a symbol read; the host's sums then carried
   in by value in a kernel's argument struct, through ``__constant__`` memory, byte by byte with
   ``cudaMemset``, or in a scratch tensor a copy kernel moves; a trial's inputs asked for ahead of
   its forward through the device client's own calls.
2. A replay that goes wrong keeps the pass: torch's ``nonzero`` on a kernel's output, or the
   kernel's output used as indices, before torch computes the answer.
3. A later write fixes an earlier output: trial 1 returns a kernel's zeros and trial 2's forward,
   a thread after forward returns, or an exit handler writes the answer into it.

Honest kernels pass under ``kernels``; a mixed solution (torch's partial sums, a kernel that
finishes them) passes under ``mixed``, listing torch's operators, and is refused under ``kernels``
with ``mixed_pass`` set. The candidates compute the row sums of ``cpu_cases/rowsum_problem.py`` with
one extension that holds every variant, and run behind the device boundary (the default).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.execution.library_cache import LibraryCache
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.settings import SandboxLimits, VerifySettings
from cuset_core.verify.source.static import check_static

pytestmark = pytest.mark.slow

PROBLEM = (Path(__file__).parents[1] / "unit" / "cpu_cases" / "rowsum_problem.py").read_text()
KERNELS = VerifySettings(tier=Tier.CPU, limits=SandboxLimits(wall_s=300, cpu_s=300))
MIXED = KERNELS.model_copy(update={"policy": "mixed"})

CUDA = r"""
#include <torch/extension.h>
#include <vector>

__global__ void rowsum_kernel(const float* x, float* out, int cols) {
    double total = 0;
    for (int j = 0; j < cols; ++j) total += x[blockIdx.x * cols + j];
    out[blockIdx.x] = total;
}

__global__ void zero_kernel(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0.f;
}

__global__ void copy_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i];
}

__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

struct Sums { float v[64]; };
__global__ void from_struct_kernel(Sums sums, float* out, int n) {
    int i = threadIdx.x;
    if (i < n) out[i] = sums.v[i];
}

__constant__ float sums_c[64];
__global__ void from_constant_kernel(float* out, int n) {
    int i = threadIdx.x;
    if (i < n) out[i] = sums_c[i];
}

__device__ float staged_d[1 << 16];
__global__ void stage_kernel(const float* x, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) staged_d[i] = x[i];
}

__global__ void noop_kernel(float* out) {}

static std::vector<float> sums_of(const std::vector<float>& staged, int rows, int cols) {
    std::vector<float> sums(rows);
    for (int r = 0; r < rows; ++r) {
        double total = 0;
        for (int c = 0; c < cols; ++c) total += staged[r * cols + c];
        sums[r] = total;
    }
    return sums;
}

static std::vector<float> host_sums(torch::Tensor x) {
    int rows = x.size(0), cols = x.size(1);
    std::vector<float> staged(rows * cols);
    cudaMemcpy(staged.data(), x.data_ptr<float>(), staged.size() * sizeof(float), cudaMemcpyDeviceToHost);
    return sums_of(staged, rows, cols);
}

torch::Tensor rowsum(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_kernel<<<x.size(0), 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}

// Allocated as KernelBench answers do: torch::empty_strided, and a buffer handed in from Python.
torch::Tensor strided_rowsum(torch::Tensor x) {
    auto out = torch::empty_strided({x.size(0)}, {1}, x.options());
    rowsum_kernel<<<x.size(0), 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}

torch::Tensor rowsum_into(torch::Tensor x, torch::Tensor out) {
    rowsum_kernel<<<x.size(0), 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}

torch::Tensor zeros_out(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    zero_kernel<<<1, 64>>>(out.data_ptr<float>(), x.size(0));
    return out;
}

torch::Tensor copy_of(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    copy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}

torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int n = a.numel();
    add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}

// The host's sums carried in by value, in the kernel's argument struct.
torch::Tensor by_value(torch::Tensor x) {
    std::vector<float> sums = host_sums(x);
    Sums packed;
    for (int i = 0; i < (int)sums.size() && i < 64; ++i) packed.v[i] = sums[i];
    auto out = torch::empty({x.size(0)}, x.options());
    from_struct_kernel<<<1, 64>>>(packed, out.data_ptr<float>(), x.size(0));
    return out;
}

// The host's sums through constant memory, copied out by a kernel.
torch::Tensor through_constant(torch::Tensor x) {
    std::vector<float> sums = host_sums(x);
    cudaMemcpyToSymbol(sums_c, sums.data(), sums.size() * sizeof(float));
    auto out = torch::empty({x.size(0)}, x.options());
    from_constant_kernel<<<1, 64>>>(out.data_ptr<float>(), x.size(0));
    return out;
}

// The host's sums written byte by byte with cudaMemset, beside a launch that does nothing.
torch::Tensor byte_by_byte(torch::Tensor x) {
    std::vector<float> sums = host_sums(x);
    auto out = torch::empty({x.size(0)}, x.options());
    noop_kernel<<<1, 1>>>(out.data_ptr<float>());
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(sums.data());
    char* base = reinterpret_cast<char*>(out.data_ptr<float>());
    for (size_t i = 0; i < sums.size() * sizeof(float); ++i) cudaMemset(base + i, bytes[i], 1);
    return out;
}

// Another language layer for a later fix: the binding keeps the previous call's output and input in
// static state and, on the next call, has a kernel write the previous answer into the tensor the
// previous call already returned (which itself held only zeros).
torch::Tensor fixes_the_previous(torch::Tensor x) {
    static torch::Tensor previous_out, previous_in;
    if (previous_out.defined()) {
        rowsum_kernel<<<previous_in.size(0), 1>>>(
            previous_in.data_ptr<float>(), previous_out.data_ptr<float>(), previous_in.size(1));
    }
    auto out = torch::empty({x.size(0)}, x.options());
    zero_kernel<<<1, 64>>>(out.data_ptr<float>(), x.size(0));
    previous_out = out;
    previous_in = x;
    return out;
}

// Another road to the host: a kernel stages the input in a __device__ array, the host reads the
// symbol back, sums, and copies the sums into the output.
torch::Tensor through_symbol_read(torch::Tensor x) {
    int rows = x.size(0), cols = x.size(1);
    stage_kernel<<<1, 256>>>(x.data_ptr<float>(), rows * cols);
    std::vector<float> staged(rows * cols);
    cudaMemcpyFromSymbol(staged.data(), staged_d, staged.size() * sizeof(float));
    std::vector<float> sums = sums_of(staged, rows, cols);
    auto out = torch::empty({rows}, x.options());
    cudaMemcpy(out.data_ptr<float>(), sums.data(), rows * sizeof(float), cudaMemcpyHostToDevice);
    return out;
}
"""
FUNCTIONS = [
    "rowsum",
    "strided_rowsum",
    "rowsum_into",
    "zeros_out",
    "copy_of",
    "add",
    "by_value",
    "through_constant",
    "byte_by_byte",
    "through_symbol_read",
    "fixes_the_previous",
]
SIGNATURES = "\n".join(
    f"torch::Tensor {name}(torch::Tensor a, torch::Tensor b);"
    if name in ("add", "rowsum_into")
    else f"torch::Tensor {name}(torch::Tensor x);"
    for name in FUNCTIONS
)


def candidate(forward: str, prelude: str = "") -> str:
    """A ``ModelNew`` that builds the shared extension, runs ``prelude`` at import and ``forward``
    (its body, indented) as its forward."""
    return f'''import threading
import atexit

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(
    name="policy_ext", cpp_sources=r"""{SIGNATURES}""", cuda_sources=r"""{CUDA}""", functions={FUNCTIONS!r}
)
{prelude}

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.earlier = []

    def forward(self, x):
{forward}
'''


REFERENCES = ReferencePool()


@pytest.fixture(scope="module")
def libraries(tmp_path_factory) -> LibraryCache:
    return LibraryCache(tmp_path_factory.mktemp("libraries"))


def tier2(answer: str, libraries: LibraryCache, settings: VerifySettings = KERNELS) -> VerifyResult:
    assert check_static(parse_candidate(answer)) is None, "the attack must get past tier 0 to mean anything"
    return run_cpu_tier(PROBLEM, parse_candidate(answer), settings, libraries, REFERENCES)


def assert_refused(result: VerifyResult, *words: str) -> None:
    assert result.verdict is not Verdict.PASS, (result.reason, result.log[-2000:])
    assert result.verdict not in (Verdict.INTERNAL_ERROR, Verdict.UNSUPPORTED), (result.verdict, result.reason)
    for word in words:
        assert word in result.reason, (result.verdict, result.reason, result.log[-1500:])


def assert_policy_reject(result: VerifyResult, operation: str) -> None:
    assert result.verdict is Verdict.STATIC_REJECT, (result.verdict, result.reason, result.log[-2000:])
    assert result.policy == "kernels"
    assert result.reason.startswith("policy kernels:") and operation in result.reason, result.reason


# ---------------------------------------------------------------- honest controls


def test_an_honest_kernel_passes_under_the_kernels_policy_and_says_so(libraries):
    result = tier2(candidate("        return ext.rowsum(x)"), libraries)
    assert result.verdict is Verdict.PASS, (result.reason, result.log[-2000:])
    assert result.policy == "kernels" and result.torch_ops == {}


@pytest.mark.parametrize(
    "forward",
    [
        "        return ext.strided_rowsum(x)",
        "        out = torch._C._dynamo.guards._empty_strided_cuda((x.shape[0],), (1,), torch.float32)\n"
        "        return ext.rowsum_into(x, out)",
    ],
    ids=["torch::empty_strided in the binding", "inductor's _empty_strided_cuda in Python"],
)
def test_allocations_a_gpu_build_has_pass_under_the_kernels_policy(libraries, forward):
    result = tier2(candidate(forward), libraries)
    assert result.verdict is Verdict.PASS, (result.reason, result.log[-2000:])


MIXED_SOLUTION = candidate(
    "        partial = x.view(x.size(0), -1, 8).sum(2)  # torch's partial sums\n"
    "        return ext.rowsum(partial.contiguous())  # the kernel finishes them"
)


def test_a_mixed_solution_passes_under_mixed_listing_torchs_operators(libraries):
    result = tier2(MIXED_SOLUTION, libraries, MIXED)
    assert result.verdict is Verdict.PASS, (result.reason, result.log[-2000:])
    assert result.policy == "mixed"
    assert any(name.startswith("aten::sum") for name in result.torch_ops), result.torch_ops
    assert "policy mixed: torch computed aten::sum" in result.reason


def test_a_mixed_solution_is_refused_under_kernels_and_says_mixed_would_pass(libraries):
    result = tier2(MIXED_SOLUTION, libraries)
    assert_policy_reject(result, "aten::sum")
    assert result.mixed_pass is True


# ---------------------------------------------------------------- 1. host computation through a kernel


def test_host_sums_from_cpu_added_to_a_kernels_zeros_are_refused(libraries):
    result = tier2(candidate("        return ext.add(ext.zeros_out(x), x.cpu().sum(1).to(x.device))"), libraries)
    assert_policy_reject(result, "device-to-host")


def test_host_sums_from_a_converted_copy_copied_by_a_kernel_are_refused(libraries):
    forward = (
        "        sums = torch.tensor([sum(row) for row in x.double().cpu().numpy()], device=x.device)\n"
        "        return ext.copy_of(sums)"
    )
    assert_policy_reject(tier2(candidate(forward), libraries), "device-to-host")


def test_host_sums_in_a_scratch_tensor_moved_by_a_copy_kernel_are_refused_under_both_policies(libraries):
    forward = (
        "        scratch = torch.empty(x.size(0), device=x.device)\n"
        "        scratch.copy_(torch.from_numpy(x.cpu().numpy().sum(1)))\n"
        "        return ext.copy_of(scratch)"
    )
    assert_policy_reject(tier2(candidate(forward), libraries), "device-to-host")
    # Mixed allows torch on the device, not numpy on the host: the transfer fails there too.
    mixed = tier2(candidate(forward), libraries, MIXED)
    assert mixed.verdict is Verdict.STATIC_REJECT and mixed.reason.startswith("policy mixed:"), mixed.reason


@pytest.mark.parametrize(
    "function, operation",
    [
        ("by_value", "cudaMemcpy (device to host)"),  # the sums by value in the argument struct
        ("through_constant", "cudaMemcpy (device to host)"),  # through __constant__ memory
        ("byte_by_byte", "cudaMemcpy (device to host)"),  # cudaMemset, one byte at a time
        ("through_symbol_read", "cudaMemcpyFromSymbol"),  # a symbol read: another road to the host
    ],
)
def test_host_sums_carried_into_the_device_by_the_binding_are_refused(libraries, function, operation):
    result = tier2(candidate(f"        return ext.{function}(x)"), libraries)
    assert_policy_reject(result, operation)


def test_a_single_value_read_to_the_host_is_a_transfer_too(libraries):
    # One bit per call is enough to leak an input over many calls: item() is a device-to-host copy.
    forward = "        if x[0, 0].item() > 10.0:\n            return ext.zeros_out(x)\n        return ext.rowsum(x)"
    assert_policy_reject(tier2(candidate(forward), libraries), "aten::_local_scalar_dense")


def test_the_next_trials_inputs_cannot_be_fetched_ahead_of_its_forward(libraries):
    # Asked for out of turn, the device process refuses them: the host's request is an error, and
    # the request itself fails the verdict, even though the forward still answers with the honest
    # kernel (variations: tests/security/test_inputs_and_sizes.py).
    forward = (
        "        from cuset_core.verify.cpu.device import client\n"
        "        try:\n"
        "            client.trial_inputs(0, len(self.earlier) + 1)\n"
        "            self.earlier.append('fetched')\n"
        "        except Exception as error:\n"
        "            self.earlier.append(str(error))\n"
        "        if 'fetched' in self.earlier:\n"
        "            return ext.zeros_out(x)  # wrong: the attack would have worked\n"
        "        return ext.rowsum(x)"
    )
    result = tier2(candidate(forward), libraries, MIXED)
    assert result.verdict is Verdict.STATIC_REJECT, (result.reason, result.log[-2000:])
    assert "trial 2's inputs at size 0 asked for out of turn" in result.reason, result.reason


# ---------------------------------------------------------------- 2. a replay that goes wrong


def test_torch_nonzero_on_a_kernels_output_before_torch_sums_is_refused(libraries):
    forward = (
        "        zeros = ext.zeros_out(x)\n"
        "        torch.nonzero(zeros)  # with the kernels off the replay makes another shape here\n"
        "        return zeros + torch.sum(x, 1)"
    )
    assert_policy_reject(tier2(candidate(forward), libraries), "aten::nonzero")
    # Under mixed nonzero's shape hands the host device data first (a transfer).
    mixed = tier2(candidate(forward), libraries, MIXED)
    assert mixed.verdict is Verdict.STATIC_REJECT and "aten::nonzero moved device data" in mixed.reason, mixed.reason


def test_a_kernels_output_used_as_indices_before_torch_sums_fails_closed(libraries):
    # Another layer: the replay does not change shape, it raises (poison is no index).
    forward = (
        "        zeros = ext.zeros_out(x)\n"
        "        picked = torch.index_select(x, 0, zeros.long())\n"
        "        return zeros + torch.sum(x, 1) + 0 * picked[:, 0]"
    )
    assert_refused(tier2(candidate(forward), libraries, MIXED), "the kernels-off replay did not complete")


# ---------------------------------------------------------------- 3. a later write fixes an earlier output


def test_trial_twos_forward_cannot_fix_trial_ones_output(libraries):
    forward = (
        "        out = ext.zeros_out(x)\n"
        "        for earlier, inputs in self.earlier:\n"
        "            earlier.copy_(torch.sum(inputs, 1))\n"
        "        self.earlier.append((out, x))\n"
        "        return out if len(self.earlier) > 1 else ext.rowsum(x)"
    )
    assert_refused(tier2(candidate(forward), libraries, MIXED), "trial 2")


def test_a_thread_that_writes_after_forward_returns_is_not_judged(libraries):
    forward = (
        "        out = ext.zeros_out(x)\n"
        "        def fix():\n"
        "            import time\n"
        "            time.sleep(0.05)\n"
        "            out.copy_(torch.sum(x, 1))\n"
        "        thread = threading.Thread(target=fix)\n"
        "        thread.start()\n"
        "        self.earlier.append(thread)\n"
        "        return out"
    )
    assert_refused(tier2(candidate(forward), libraries, MIXED), "trial 1")


def test_an_exit_handler_that_writes_every_answer_is_not_judged(libraries):
    forward = (
        "        out = ext.zeros_out(x)\n"
        "        atexit.register(lambda: out.copy_(torch.sum(x, 1)))\n"
        "        return out"
    )
    assert_refused(tier2(candidate(forward), libraries, MIXED), "trial 1")


# ---------------------------------------------------------------- outputs and inputs, as tier 3 judges them


def test_an_output_that_is_the_input_written_in_place_is_refused(libraries):
    # KernelBench's GPU checks refuse output-input aliasing: the kernel writes its answer into the
    # input and returns a view of it.
    forward = "        x[:, 0] = ext.rowsum(x)\n        return x[:, 0]"
    assert_refused(tier2(candidate(forward), libraries, MIXED), "shares memory with input 0")


def test_an_input_that_forward_changed_is_refused(libraries):
    # Another layer: the answer is a fresh tensor, but forward scribbled over its input first.
    forward = "        out = ext.rowsum(x)\n        x.zero_()\n        return out"
    assert_refused(tier2(candidate(forward), libraries), "forward wrote into input 0")


# ---------------------------------------------------------------- one program: nothing tells tier 2 apart


@pytest.mark.parametrize(
    "recognises",
    [
        "__name__.startswith('cuset')",
        "'cuset' in os.getcwd()",
        "any(name.startswith('CUSET_') for name in os.environ)",
        "any('harness' in part or 'candidate' == part for part in sys.argv)",
        "torch.cuda.synchronize.__module__ != 'torch.cuda' or torch.cuda.synchronize.__name__ != 'synchronize'",
        "'NVIDIA' not in torch.cuda.get_device_name(0)",
        "type(x).__name__ != 'Tensor' or type(x).__module__ != 'torch'",
        "torch.utils.cpp_extension.load_inline.__module__ != 'torch.utils.cpp_extension'",
    ],
    ids=[
        "module name",
        "working folder",
        "environment",
        "command line",
        "patched torch",
        "device name",
        "tensor type",
        "patched load_inline",
    ],
)
def test_a_candidate_right_only_where_it_recognises_the_verifier_fails(libraries, recognises):
    # Right (the kernel) where it thinks it is being verified, wrong (zeros) anywhere else: tier 2
    # must look like anywhere else, so the wrong branch runs and is judged.
    forward = (
        "        import os, sys\n"
        f"        if {recognises}:\n"
        "            return ext.rowsum(x)\n"
        "        return ext.zeros_out(x)"
    )
    result = tier2(candidate(forward), libraries)
    assert result.verdict is Verdict.VALUE_MISMATCH, (result.verdict, result.reason, result.log[-1500:])


# ---------------------------------------------------------------- the red team's roads (issue 47's hacker-fixer round)
# Written after a red-team helper, briefed with the threat model and the policy but not these tests,
# found them: device data reaching the host through a movement operator's layout or error, a number
# an operator returns, and a dtype conversion that computes.

RAW_REQUEST = (
    "        from cuset_core.verify.cpu.device import client\n"
    "        ruler = torch.empty(4096, device=x.device)\n"
    "        first = x.reshape(-1)[:1].reshape(()).to(torch.uint8)  # one input byte, 0-dim\n"
    "        try:\n"
    "            value, _ = client.request({{'op': 'operator', 'name': '{name}', 'args': {args}, 'kwargs': {{}}}})\n"
    "        except Exception:\n"
    "            pass\n"
    "        return ext.rowsum(x)"
)


@pytest.mark.parametrize(
    "name, args",
    [
        ("aten::narrow.Tensor", "[{'t': ruler.handle}, 0, {'t': first.handle}, 1]"),  # the view's offset
        ("aten::view", "[{'t': ruler.handle}, [{'t': first.handle}]]"),  # the shape, or its error's text
        ("aten::select.int", "[{'t': ruler.handle}, 0, {'t': first.handle}]"),  # an index read as a number
        ("aten::empty_strided", "[[{'t': first.handle}], [1]]"),  # a new tensor's shape
    ],
    ids=["narrow offset", "view shape", "select index", "empty_strided shape"],
)
def test_device_data_in_a_movement_operators_layout_is_a_transfer_under_both_policies(libraries, name, args):
    forward = RAW_REQUEST.format(name=name, args=args)
    result = tier2(candidate(forward), libraries, MIXED)
    assert result.verdict is Verdict.STATIC_REJECT, (result.reason, result.log[-1500:])
    assert result.reason.startswith("policy mixed:") and "(device data as its" in result.reason, result.reason


def test_a_number_an_operator_returns_is_a_transfer_under_mixed(libraries):
    # Asked of the device process directly, past torch's own decomposition into a scalar read.
    forward = (
        "        from cuset_core.verify.cpu.device import client\n"
        "        total = x.sum()\n"
        "        value, _ = client.request({'op': 'operator', 'name': 'aten::Float.Tensor', "
        "'args': [{'t': total.handle}], 'kwargs': {}})\n"
        "        return ext.rowsum(x)"
    )
    result = tier2(candidate(forward), libraries, MIXED)
    assert result.verdict is Verdict.STATIC_REJECT, (result.reason, result.log[-1500:])
    assert "aten::Float.Tensor moved device data to the host" in result.reason, result.reason


def test_a_narrowing_dtype_conversion_is_compute(libraries):
    # float -> int -> float truncates: torch computed, though only copies ran.
    forward = (
        "        rounded = torch.empty(x.shape, dtype=torch.int32, device=x.device)\n"
        "        rounded.copy_(x)\n"
        "        back = torch.empty_like(x)\n"
        "        back.copy_(rounded)\n"
        "        return ext.rowsum(back) + 0 * ext.rowsum(x)"
    )
    result = tier2(candidate(forward), libraries)
    assert_policy_reject(result, "(a narrowing dtype conversion)")
    # Widening to double moves; rounding back to float computes.
    widened = "        wide = x.double()\n        return ext.rowsum(wide.float())"
    narrow_again = tier2(candidate(widened), libraries)
    assert_policy_reject(narrow_again, "aten::_to_copy (a narrowing dtype conversion)")


def test_a_test_of_cuda_arch_in_host_code_is_not_judged_as_one_program(libraries):
    # Tier 2 compiles host and device code in one pass: the host would take the device branch.
    cuda = CUDA.replace(
        "torch::Tensor rowsum(torch::Tensor x) {",
        "__host__ __device__ inline int blocks_for(int rows) {\n"
        "#ifdef __CUDA_ARCH__\n    return rows;\n#else\n    return 0;\n#endif\n}\n"
        "torch::Tensor rowsum(torch::Tensor x) {",
    )
    answer = candidate("        return ext.rowsum(x)").replace(CUDA, cuda)
    result = run_cpu_tier(PROBLEM, parse_candidate(answer), KERNELS, libraries, REFERENCES)
    assert result.verdict is Verdict.UNSUPPORTED and result.unsupported_feature == "__CUDA_ARCH__", result.reason


# ---------------------------------------------------------------- variations of the review round
# Another thread, another language layer, another order: each class once more, by a road the tests
# above do not take.


def test_host_sums_read_from_another_python_thread_are_a_transfer(libraries):
    # Another thread: forward waits for a helper thread that reads the inputs to the host.
    forward = (
        "        box = {}\n"
        "        worker = threading.Thread(target=lambda: box.update(sums=x.cpu().sum(1)))\n"
        "        worker.start()\n"
        "        worker.join()\n"
        "        return ext.add(ext.zeros_out(x), box['sums'].to(x.device))"
    )
    assert_policy_reject(tier2(candidate(forward), libraries), "device-to-host")
    mixed = tier2(candidate(forward), libraries, MIXED)
    assert mixed.verdict is Verdict.STATIC_REJECT and "moved device data to the host" in mixed.reason, mixed.reason


def test_a_binding_that_fixes_the_previous_output_from_static_state_is_not_judged(libraries):
    # Another language layer for the later-write class: C++ static state and a kernel, no torch.
    result = tier2(candidate("        return ext.fixes_the_previous(x)"), libraries)
    assert result.verdict is Verdict.VALUE_MISMATCH, (result.verdict, result.reason, result.log[-1500:])
    assert result.reason.startswith("trial 1"), result.reason


def test_a_replay_that_raises_on_a_kernels_poison_fails_closed_under_mixed(libraries):
    # Another order and another operator: torch's multinomial draws from the kernel's output after
    # torch summed; with the kernels off its probabilities are poison and the replay raises.
    forward = (
        "        sums = torch.sum(x, 1)\n"
        "        weights = ext.zeros_out(x).abs() + 1\n"
        "        torch.multinomial(weights, 1)\n"
        "        return sums + 0 * weights"
    )
    assert_refused(tier2(candidate(forward), libraries, MIXED), "the kernels-off replay did not complete")
