"""The categories of CUDA-sensitive code (DESIGN.md §3) and the names that identify them."""

from __future__ import annotations

import re
from enum import StrEnum


class Category(StrEnum):
    """What kind of execution constraint a sensitive span is coupled with."""

    QUALIFIER = "qualifier"  # execution space and launch bounds: __global__, __launch_bounds__(...)
    MEMORY_SPACE = "memory_space"  # __shared__/__constant__ declarations, __restrict__
    INDEXING = "indexing"  # threadIdx/blockIdx/... and the index arithmetic built on them
    BOUNDS_GUARD = "bounds_guard"  # conditions comparing an index with a size
    SYNC = "sync"  # barriers and fences
    WARP = "warp"  # warp primitives and lane masks
    ATOMIC = "atomic"  # atomic read-modify-writes
    LAUNCH = "launch"  # <<<...>>>, dim3 and the declarations feeding a launch
    MEMORY_API = "memory_api"  # the CUDA runtime API: cudaMalloc, cudaMemcpy, ...
    BINDING = "binding"  # the PyTorch side: tensors, data_ptr, checks, streams, load_inline


# A region's category is the first of its spans' categories in this order: the more directly a
# category decides what the kernel executes, the earlier it comes (so a launch statement whose
# arguments are ``data_ptr`` calls is a launch region, not a binding one).
DOMINANCE: tuple[Category, ...] = (
    Category.LAUNCH,
    Category.SYNC,
    Category.WARP,
    Category.ATOMIC,
    Category.BOUNDS_GUARD,
    Category.INDEXING,
    Category.QUALIFIER,
    Category.MEMORY_SPACE,
    Category.MEMORY_API,
    Category.BINDING,
)

# Grammar node types of tree-sitter-cuda that are qualifiers by themselves.
QUALIFIER_NODES = frozenset(
    {"__global__", "__device__", "__host__", "__forceinline__", "__noinline__", "launch_bounds"}
)
# Qualifier words the grammar may leave as plain identifiers (e.g. in prototypes or macros).
QUALIFIER_WORDS = frozenset(
    {"__global__", "__device__", "__host__", "__forceinline__", "__noinline__", "__launch_bounds__"}
)
SPACE_QUALIFIERS = frozenset({"__shared__", "__constant__", "__managed__"})
RESTRICT = "__restrict__"

INDEX_BUILTINS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
WARP_SIZE = "warpSize"

SYNC_CALLS = frozenset(
    {
        "__syncthreads",
        "__syncthreads_count",
        "__syncthreads_and",
        "__syncthreads_or",
        "__syncwarp",
        "__threadfence",
        "__threadfence_block",
        "__threadfence_system",
    }
)
_WARP_CALL = re.compile(r"^__(shfl\w*|ballot\w*|any_sync|all_sync|activemask|match_\w+|reduce_\w+_sync)$")
_FULL_MASK = re.compile(r"^0[xX][fF]{8}[uUlL]*$")
_ATOMIC_CALL = re.compile(r"^atomic[A-Z]\w*$")
_RUNTIME_CALL = re.compile(r"^cuda[A-Z]\w*$")
_DISPATCH_MACRO = re.compile(r"^AT_DISPATCH_\w+$")
BINDING_CALLS = frozenset(
    {
        "TORCH_CHECK",
        "TORCH_CHECK_VALUE",
        "TORCH_CHECK_TYPE",
        "TORCH_INTERNAL_ASSERT",
        "C10_CUDA_KERNEL_LAUNCH_CHECK",
        "C10_CUDA_CHECK",
        "getCurrentCUDAStream",
        "getDefaultCUDAStream",
    }
)
DATA_POINTER_METHODS = frozenset({"data_ptr", "data", "const_data_ptr", "mutable_data_ptr"})
TENSOR_TYPES = frozenset({"torch::Tensor", "at::Tensor"})
MODULE_MACROS = frozenset({"PYBIND11_MODULE", "TORCH_LIBRARY", "TORCH_LIBRARY_IMPL"})
LAUNCH_TYPE = "dim3"


def call_category(name: str) -> Category | None:
    """Category of a call to the function or macro ``name`` (its last ``::`` part), if sensitive."""
    if name in SYNC_CALLS:
        return Category.SYNC
    if _WARP_CALL.match(name):
        return Category.WARP
    if _ATOMIC_CALL.match(name):
        return Category.ATOMIC
    if _RUNTIME_CALL.match(name):
        return Category.MEMORY_API
    if name in BINDING_CALLS:
        return Category.BINDING
    return None


def is_dispatch_macro(name: str) -> bool:
    """``AT_DISPATCH_*``: only the macro name is sensitive; its lambda holds ordinary code."""
    return bool(_DISPATCH_MACRO.match(name))


def is_full_mask(literal: str) -> bool:
    """A 32-lane mask literal such as ``0xffffffff``."""
    return bool(_FULL_MASK.match(literal))
