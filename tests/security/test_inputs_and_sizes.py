"""Trial inputs, sizes and what a verdict says of them (issue 47, items 1 and 4), behind tier 2's
device boundary (the default):

1. Trial inputs exist for the candidate's host process only as device tensors, during their own
   trial's forward: asking for the next trial's inputs, another trial's again or the second size's
   out of turn is refused and named in the verdict; a device operation whose failure could tell the
   host a bit of device data leaves the device unusable (as a GPU's context after a device-side
   assert); the seed is nowhere the host can read. A kernel, native code inside the device process,
   cannot reach libc there to hand the inputs over: a host address among its arguments (libc's
   functions, plain or in a struct passed by value) is ``cudaErrorIllegalAddress`` before it runs,
   and a system call it makes without the host's help (libc found from a pointer of its own) ends
   the device process with the runtime's line.
2. Index arithmetic in an integer type narrower than the original sizes need (``short``, an
   ``unsigned short`` through a typedef, ``int`` on a problem of more than 2^31 elements) is
   ``static_reject`` with its line when tier 2 ran only reduced sizes; ``int`` under 2^31 and 64-bit
   types pass.
3. Every verdict says which sizes its trials ran (both sizes, their input shapes) and whether the
   original sizes ran, and ``cuset verify`` prints it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cuset_core.cli.verify import _print_human
from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.execution.library_cache import LibraryCache
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.settings import SandboxLimits, VerifySettings
from cuset_core.verify.source.static import check_static

pytestmark = pytest.mark.slow

ROWSUM = (Path(__file__).parents[1] / "unit" / "cpu_cases" / "rowsum_problem.py").read_text()
KERNELS = VerifySettings(tier=Tier.CPU, limits=SandboxLimits(wall_s=300, cpu_s=300))
MIXED = KERNELS.model_copy(update={"policy": "mixed"})
# A budget far under the problems below, so that tier 2 runs reduced sizes only.
SMALL = KERNELS.model_copy(update={"max_elements": 8192})


def scale_problem(batch: int, dim: int) -> str:
    return f"""import torch
import torch.nn as nn

BATCH = {batch}
DIM = {dim}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.randn(BATCH, DIM, device="cuda")]


def get_init_inputs():
    return []
"""


MILLION = scale_problem(64, 16384)  # 1,048,576 elements: more than a short counts
BEYOND_INT = scale_problem(65536, 65536)  # 2^32 elements: more than an int counts
FITS = scale_problem(64, 1024)  # small enough for a rerun at its original sizes


# The module's candidates are one batch, as an eval's samples are: one reference run per problem
# and settings (a reference side is a sandboxed process that imports torch, seconds of CPU).
REFERENCES = ReferencePool()


def tier2(answer: str, libraries: LibraryCache, settings: VerifySettings = KERNELS, problem: str = ROWSUM):
    assert check_static(parse_candidate(answer)) is None, "the attack must get past tier 0 to mean anything"
    return run_cpu_tier(problem, parse_candidate(answer), settings, libraries, REFERENCES)


def assert_verdict(result: VerifyResult, verdict: Verdict, *words: str) -> None:
    assert result.verdict is verdict, (result.verdict, result.reason, result.log[-2000:])
    for word in words:
        assert word in result.reason, (result.reason, result.log[-1500:])


# ---------------------------------------------------------------- 1. trial inputs

ROWSUM_CUDA = r"""
#include <torch/extension.h>

__global__ void rowsum_kernel(const float* x, float* out, int cols) {
    double total = 0;
    for (int j = 0; j < cols; ++j) total += x[blockIdx.x * cols + j];
    out[blockIdx.x] = total;
}

torch::Tensor rowsum(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_kernel<<<x.size(0), 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
"""


def rowsum_candidate(forward: str, cuda: str = ROWSUM_CUDA) -> str:
    """A ``ModelNew`` whose forward runs ``forward`` (its body, indented) beside an honest row-sum
    kernel, ``ext.rowsum`` (or ``cuda``'s ``rowsum``); ``self.calls`` counts its calls (the trial,
    0-based)."""
    return f'''import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="inputs_ext", cpp_sources="torch::Tensor rowsum(torch::Tensor x);",
                  cuda_sources=r"""{cuda}""", functions=["rowsum"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        trial, self.calls = self.calls, self.calls + 1
{forward}
'''


def asking(size: str, trial: str) -> str:
    """A forward that asks the device client for trial ``trial``'s inputs at ``size`` (Python
    expressions), keeps going whatever it gets, and answers with the honest kernel."""
    return (
        "        from cuset_core.verify.cpu.device import client\n"
        "        try:\n"
        f"            client.trial_inputs({size}, {trial})\n"
        "        except Exception:\n"
        "            pass  # refused: the attack goes on as if nothing happened\n"
        "        return ext.rowsum(x)"
    )


@pytest.mark.parametrize(
    ("size", "trial", "settings", "asked"),
    [
        ("0", "trial + 1", KERNELS, "trial 2's inputs at size 0"),
        ("0", "max(trial - 1, 0)", MIXED, "trial 1's inputs at size 0"),
        ("1", "0", SMALL.model_copy(update={"policy": "mixed"}), "trial 1's inputs at size 1"),
    ],
    ids=["the next trial's, ahead", "the previous trial's, again", "the second size's, during the first"],
)
def test_inputs_asked_for_out_of_turn_are_refused_and_the_verdict_says_so(libraries, size, trial, settings, asked):
    # The row sums of 16 rows of 100,000 columns: under SMALL's budget tier 2 runs two sizes.
    problem = ROWSUM.replace("COLS = 1000", "COLS = 100000")
    result = tier2(rowsum_candidate(asking(size, trial)), libraries, settings, problem)
    assert_verdict(result, Verdict.STATIC_REJECT, asked, "asked for out of turn")
    assert result.mixed_pass in (None, False)


def test_no_other_call_of_the_device_client_hands_over_trial_data(libraries):
    # Each request the client can send, tried during trial 1 on its input's address: the ones that
    # answer with data are transfers the verdict names; setup gives no trial's inputs.
    forward = """        from cuset_core.verify.cpu.device import client
        handed, _ = client.request({"op": "setup", "size": 0})
        if "trials" in handed:
            return ext.rowsum(x) * 0  # would be wrong: setup handed over trial data
        address = x.data_ptr()
        for header in (
            {"op": "malloc", "bytes": 16},
            {"op": "memset", "dst": address, "value": 0, "n": 0},
            {"op": "last_error", "take": False},
            {"op": "d2h", "dst": 0, "src": address, "n": 16},
        ):
            try:
                client.request(header)
            except Exception:
                pass
        return ext.rowsum(x)"""
    result = tier2(rowsum_candidate(forward), libraries)
    assert_verdict(result, Verdict.STATIC_REJECT, "trial 1: cudaMemcpy (device to host) moved device data to the host")


def test_a_device_failure_that_tells_one_bit_leaves_the_device_unusable(libraries):
    # Under mixed torch may compute, so an assert on a comparison tells the host whether it held:
    # one bit of an input per try. After the first failure nothing runs any more, as on a GPU.
    forward = """        try:
            torch._assert_async(x[0, 0] > 100.0)  # never holds for randn: the failure is the bit
        except Exception:
            pass
        return ext.rowsum(x)"""
    result = tier2(rowsum_candidate(forward), libraries, MIXED)
    # The kernel's call after it cannot run: its first device request (the output's allocation)
    # fails, and the trial with it, whatever the host learnt.
    assert_verdict(result, Verdict.RUNTIME_ERROR, "the device is unusable after an operation failed on it")
    assert "Expected Tensor with single nonzero value" in result.log  # the assert, in the judge's log


# The binding itself catches the failed request in C++ and answers from a host tensor instead.
ROWSUM_CATCHING_CUDA = ROWSUM_CUDA.replace(
    """    auto out = torch::empty({x.size(0)}, x.options());""",
    """    torch::Tensor out;
    try {
        out = torch::empty({x.size(0)}, x.options());
    } catch (const c10::Error&) {
        return torch::zeros({x.size(0)});
    }""",
)


def test_a_binding_that_catches_the_failed_device_in_cpp_still_cannot_answer(libraries):
    # The one-bit failure again, caught one layer down: the C++ binding swallows the device's
    # refusal and returns a tensor of the host's own. A GPU's context would be just as dead.
    forward = """        try:
            torch._assert_async(x[0, 0] > 100.0)
        except Exception:
            pass
        return ext.rowsum(x)"""
    result = tier2(rowsum_candidate(forward, ROWSUM_CATCHING_CUDA), libraries, MIXED)
    assert_verdict(result, Verdict.RUNTIME_ERROR, "the device is unusable after an operation failed on it")
    assert result.mixed_pass in (None, False)
    assert "Expected Tensor with single nonzero value" in result.log  # the device's own traceback


def test_a_failure_whose_message_holds_device_data_tells_the_host_only_its_type(libraries):
    # Another road for the bit: an index computed from the input, out of range, whose torch message
    # ("index 123456 is out of bounds ...") would carry the input's value. The host hears the type
    # only, and repeats what it heard in its own error for the verdict to show.
    forward = """        try:
            x[0].index_select(0, (x[0, :1] * 1e6).abs().long() + 100000)
        except Exception as exc:
            raise RuntimeError(f"heard: {exc}") from None
        return ext.rowsum(x)"""
    result = tier2(rowsum_candidate(forward), libraries, MIXED)
    assert_verdict(result, Verdict.RUNTIME_ERROR, "heard: IndexError (in a device operation)")
    heard = result.reason.split("heard: ", 1)[1]
    assert not any(ch.isdigit() for ch in heard), heard
    assert "IndexError: index out of range" in result.log  # the whole error, in the judge's log only


def test_the_seed_and_the_inputs_file_are_nowhere_the_host_can_read(libraries):
    # Every place the host could look for the judge's seed or another trial's inputs: the job, the
    # folder, the environment, the device process's memory and descriptors. Finding any: a wrong answer.
    forward = """        import json
        found = []
        for name in os.listdir("."):
            if name.endswith(".json") and json.loads(open(name).read()).get("input_seed") is not None:
                found.append(name)
        if any(name.endswith(".safetensors") for name in os.listdir(".")):
            found.append(str(os.listdir(".")))
        if any("INPUT_SEED" in name.upper() for name in os.environ):
            found.append("environment")
        device = os.getppid()
        for path in (f"/proc/{device}/mem", f"/proc/{device}/environ"):
            try:
                with open(path, "rb") as handle:
                    handle.read(1)
                found.append(path)
            except OSError:
                pass
        try:
            found.extend(os.listdir(f"/proc/{device}/fd"))
        except OSError:
            pass
        if found:
            raise RuntimeError(f"the host found {found}")
        return ext.rowsum(x)"""
    assert_verdict(tier2(rowsum_candidate(forward), libraries), Verdict.PASS)


# Another road for the inputs: the host's own Python objects. The harness freezes what it imported
# before the candidate runs (fewer objects for each collection to scan); the candidate unfreezes
# them and searches everything the collector tracks for a host tensor of the input's shape, from
# forward itself and from a thread of its own. Finding one: a wrong answer.
SEARCH_THE_COLLECTOR = """        import gc
        gc.unfreeze()
        shape = tuple(x.shape)
        found = [o for o in gc.get_objects()
                 if isinstance(o, torch.Tensor) and o is not x and tuple(o.shape) == shape and o.device.type == "cpu"]
        if found:
            raise RuntimeError(f"the host found {len(found)} tensors of the input's shape")"""


@pytest.mark.parametrize("where", ["forward", "thread"])
def test_the_inputs_are_among_no_object_the_hosts_collector_tracks(libraries, where):
    search = SEARCH_THE_COLLECTOR
    if where == "thread":
        search = (
            "        import threading\n        failures = []\n\n        def look():\n            try:\n"
            + textwrap.indent(search, " " * 8)
            + "\n            except RuntimeError as exc:\n                failures.append(exc)\n\n"
            "        worker = threading.Thread(target=look)\n        worker.start()\n        worker.join()\n"
            "        if failures:\n            raise failures[0]"
        )
    forward = search + "\n        return ext.rowsum(x)"
    assert_verdict(tier2(rowsum_candidate(forward), libraries), Verdict.PASS)


# The candidate's kernels run as native code inside the device process (docs/verification.md,
# "Kernels inside the device process"). A kernel that calls libc through pointers the host passes as
# kernel arguments (the host is a fork: the same addresses) would write a trial's inputs to a file of
# the folder both processes share; the host reads it, sums in Python and passes the sums by value to
# a kernel.
KERNEL_CALLS_THE_HOST = r'''import ctypes
import os
import struct

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda = r"""
#include <torch/extension.h>

typedef int (*open_t)(const char*, int, int);
typedef long (*write_t)(int, const void*, unsigned long);
typedef int (*close_t)(int);

__global__ void leak_kernel(const float* x, long bytes, const char* path, long open_fn, long write_fn, long close_fn) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        int fd = ((open_t)open_fn)(path, 65, 0644);
        ((write_t)write_fn)(fd, x, bytes);
        ((close_t)close_fn)(fd);
    }
}

struct Sums { float v[64]; };
__global__ void from_struct_kernel(Sums sums, float* out, int n) {
    int i = threadIdx.x;
    if (i < n) out[i] = sums.v[i];
}

void leak(torch::Tensor x, torch::Tensor path, int64_t open_fn, int64_t write_fn, int64_t close_fn) {
    leak_kernel<<<1, 1>>>(x.data_ptr<float>(), x.numel() * 4, (const char*)path.data_ptr<unsigned char>(),
                          open_fn, write_fn, close_fn);
}

torch::Tensor place(torch::Tensor like, std::vector<double> sums) {
    Sums packed;
    for (size_t i = 0; i < sums.size() && i < 64; ++i) packed.v[i] = sums[i];
    auto out = torch::empty({like.size(0)}, like.options());
    from_struct_kernel<<<1, 64>>>(packed, out.data_ptr<float>(), like.size(0));
    return out;
}
"""
ext = load_inline(name="leak_ext", cpp_sources="void leak(torch::Tensor x, torch::Tensor path, int64_t open_fn, int64_t write_fn, int64_t close_fn);\ntorch::Tensor place(torch::Tensor like, std::vector<double> sums);",
                  cuda_sources=cuda, functions=["leak", "place"])
libc = ctypes.CDLL(None)
ADDRESSES = [ctypes.cast(getattr(libc, name), ctypes.c_void_p).value for name in ("open", "write", "close")]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        name = os.path.abspath(f"leak{self.calls}.bin").encode() + b"\0"
        path = torch.frombuffer(bytearray(name), dtype=torch.uint8).to("cuda")
        ext.leak(x, path, *ADDRESSES)
        data = open(name[:-1], "rb").read()
        rows, cols = x.shape
        values = struct.unpack(f"{rows * cols}f", data)
        sums = [sum(values[r * cols:(r + 1) * cols]) for r in range(rows)]
        return ext.place(x, sums)
'''


# The same pointers in a struct passed by value.
LIBC_IN_A_STRUCT = (
    KERNEL_CALLS_THE_HOST.replace(
        "long open_fn, long write_fn, long close_fn) {\n",
        "Libc libc) {\n    long open_fn = libc.open_fn, write_fn = libc.write_fn, close_fn = libc.close_fn;\n",
    )
    .replace(
        "__global__ void leak_kernel", "struct Libc { long open_fn, write_fn, close_fn; };\n__global__ void leak_kernel"
    )
    .replace("open_fn, write_fn, close_fn);\n}", "Libc{open_fn, write_fn, close_fn});\n}")
)
# No address from the host: the kernel finds libc from a pointer of its own (libc's ``stderr``, which
# the runtime's header references) and the functions' distances from it, plain numbers (the same
# libc file runs here and in the sandbox; an attacker would read them from libc's symbol table).
LIBC_FOUND_BY_THE_KERNEL = KERNEL_CALLS_THE_HOST.replace("((open_t)open_fn)", "((open_t)((long)stderr + open_fn))")
LIBC_FOUND_BY_THE_KERNEL = (
    LIBC_FOUND_BY_THE_KERNEL.replace("((write_t)write_fn)", "((write_t)((long)stderr + write_fn))")
    .replace("((close_t)close_fn)", "((close_t)((long)stderr + close_fn))")
    .replace(
        "ADDRESSES = [ctypes.cast(getattr(libc, name), ctypes.c_void_p).value",
        "ADDRESSES = [ctypes.cast(getattr(libc, name), ctypes.c_void_p).value"
        ' - ctypes.c_void_p.in_dll(libc, "stderr").value',
    )
)

# Another road: the host passes the addresses encoded (XOR with a constant), so no argument word is a
# host address; the kernel decodes them. The kernel thread's filter stops the open.
LIBC_ENCODED = (
    KERNEL_CALLS_THE_HOST.replace("((open_t)open_fn)", "((open_t)(open_fn ^ 0x5a5a5a5a5a5aL))")
    .replace("((write_t)write_fn)", "((write_t)(write_fn ^ 0x5a5a5a5a5a5aL))")
    .replace("((close_t)close_fn)", "((close_t)(close_fn ^ 0x5a5a5a5a5a5aL))")
    .replace(
        'for name in ("open", "write", "close")]',
        'for name in ("open", "write", "close")]\nADDRESSES = [a ^ 0x5A5A5A5A5A5A for a in ADDRESSES]',
    )
)
# Another thread: the kernel starts a thread of its own (pthread_create, found from libc's stderr)
# to make the calls off the filtered thread; creating it is a system call the filter stops (glibc
# blocks signals around clone, so the trap kills the device process with SIGSYS, without the
# runtime's line).
LIBC_ON_ANOTHER_THREAD = (
    LIBC_FOUND_BY_THE_KERNEL.replace(
        "__global__ void leak_kernel",
        "#include <fcntl.h>\n"
        "typedef int (*create_t)(unsigned long*, const void*, void* (*)(void*), void*);\n"
        "static void* escape(void* path) { return (void*)(long)open((const char*)path, 65, 0644); }\n"
        "__global__ void leak_kernel",
    )
    .replace(
        "        int fd = ((open_t)((long)stderr + open_fn))(path, 65, 0644);",
        "        unsigned long thread;\n"
        "        ((create_t)((long)stderr + close_fn))(&thread, nullptr, escape, (void*)path);\n"
        "        int fd = -1;",
    )
    .replace('for name in ("open", "write", "close")]', 'for name in ("open", "write", "pthread_create")]')
)


@pytest.mark.parametrize(
    "answer", [KERNEL_CALLS_THE_HOST, LIBC_IN_A_STRUCT], ids=["libc_as_arguments", "libc_in_a_struct_by_value"]
)
def test_a_kernel_argument_that_holds_a_libc_address_is_an_illegal_address(libraries, answer):
    result = tier2(answer, libraries)
    assert_verdict(result, Verdict.RUNTIME_ERROR, "cudaErrorIllegalAddress", "leak_kernel's argument 4", "libc")


@pytest.mark.parametrize(
    "answer",
    [LIBC_FOUND_BY_THE_KERNEL, LIBC_ENCODED, LIBC_ON_ANOTHER_THREAD],
    ids=["libc_from_stderr", "libc_addresses_encoded", "libc_on_another_thread"],
)
def test_a_kernel_that_finds_libc_itself_cannot_open_a_file(libraries, answer):
    result = tier2(answer, libraries)
    assert_verdict(result, Verdict.RUNTIME_ERROR, "system call")


# ---------------------------------------------------------------- 2. narrow index types


def scale_candidate(kernel: str, name: str) -> str:
    """A ``ModelNew`` that doubles its input with ``kernel`` (a ``scale_kernel(x, out, n)``),
    launched with one thread per element."""
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda = r"""
#include <torch/extension.h>
#include <cstdint>
{kernel}
torch::Tensor scale(torch::Tensor x) {{
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}}
"""
ext = load_inline(name="{name}", cpp_sources="torch::Tensor scale(torch::Tensor x);", cuda_sources=cuda,
                  functions=["scale"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.scale(x)
'''


SHORT_INDEX = """
__global__ void scale_kernel(const float* x, float* out, int n) {
    short i = blockIdx.x * blockDim.x + threadIdx.x;  // right up to 32,767 elements
    if (i < n) out[i] = 2.0f * x[i];
}
"""
# Another road: the counter's type through a typedef, a grid-stride loop bounded by the size.
TYPEDEF_COUNTER = """
typedef unsigned short count_t;
__global__ void scale_kernel(const float* x, float* out, int n) {
    for (count_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        out[i] = 2.0f * x[i];
}
"""
INT_INDEX = """
__global__ void scale_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i];
}
"""
WIDE_INDEX = """
__global__ void scale_kernel(const float* x, float* out, int64_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i];
}
"""


def line_of(answer: str, text: str) -> int:
    return answer[: answer.index(text)].count("\n") + 1


@pytest.mark.parametrize(
    ("kernel", "declaration", "problem", "needed"),
    [
        (SHORT_INDEX, "short i", MILLION, "1,048,576"),
        (TYPEDEF_COUNTER, "count_t i", MILLION, "1,048,576"),
        (INT_INDEX, "int n", BEYOND_INT, "4,294,967,296"),
    ],
    ids=["short", "unsigned short through a typedef", "int beyond 2^31"],
)
def test_an_index_too_narrow_for_the_original_sizes_is_refused_with_its_line(
    libraries, kernel, declaration, problem, needed
):
    answer = scale_candidate(kernel, "narrow_" + declaration.split()[0])
    result = tier2(answer, libraries, SMALL, problem)
    line = line_of(answer, declaration.split()[0] + " " + declaration.split()[1])
    assert_verdict(result, Verdict.STATIC_REJECT, f"line {line}: {declaration}", needed)
    assert result.diagnostics and result.diagnostics[0].line == line
    assert result.original_sizes_run is False


@pytest.mark.parametrize(
    ("kernel", "problem"), [(INT_INDEX, MILLION), (WIDE_INDEX, BEYOND_INT)], ids=["int under 2^31", "size_t"]
)
def test_indices_wide_enough_for_the_original_sizes_pass(libraries, kernel, problem):
    result = tier2(scale_candidate(kernel, "wide_enough"), libraries, SMALL, problem)
    assert_verdict(result, Verdict.PASS)


# ---------------------------------------------------------------- 3. the sizes a verdict ran


def test_a_pass_at_reduced_sizes_says_both_sizes_and_that_the_original_did_not_run(libraries, capsys):
    result = tier2(scale_candidate(INT_INDEX, "sizes_said"), libraries, SMALL, MILLION)
    assert_verdict(result, Verdict.PASS)
    first, second = result.sizes_run
    assert first.shrunk and second.shrunk and first.sizes != second.sizes
    for run in (first, second):
        assert len(run.input_shapes) == SMALL.seeds
        assert all(shapes == [[run.sizes["BATCH"], run.sizes["DIM"]]] for shapes in run.input_shapes)
        assert run.sizes["BATCH"] * run.sizes["DIM"] <= SMALL.max_elements
    assert result.original_sizes_run is False
    assert result.model_dump(mode="json")["original_sizes_run"] is False  # what the API returns
    _print_human(result, Path("candidate.py"))
    printed = capsys.readouterr().out
    assert "sizes run: " in printed and "original sizes not run" in printed
    assert f"DIM={first.sizes['DIM']} (of 16384)" in printed, printed


def test_a_rerun_at_the_original_sizes_says_it_ran_them(libraries):
    # Right only at the original DIM (hard-coded): it fails at the reduced sizes, and the rerun at
    # the original sizes, which fit, decides; the verdict lists both runs.
    hardcoded = INT_INDEX.replace("2.0f * x[i];", "2.0f * x[i] + (n == 64 * 1024 ? 0.0f : 1.0f);")
    result = tier2(scale_candidate(hardcoded, "hardcoded"), libraries, SMALL, FITS)
    assert_verdict(result, Verdict.PASS, "at the original sizes")
    assert result.sizes_run[0].shrunk and not result.sizes_run[-1].shrunk
    assert result.sizes_run[-1].input_shapes[0] == [[64, 1024]]
    assert result.original_sizes_run is True
