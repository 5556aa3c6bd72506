"""Tier 0: static checks of a candidate, by AST and text only (nothing of it is executed).

A Python candidate must parse, define ``ModelNew`` with a ``forward``, build an extension with
``load_inline`` whose sources resolve statically and hold a ``__global__`` kernel, and call
that extension from ``forward`` (directly, through helpers, methods, sub-modules or an autograd
``Function``). Rejected as fallbacks: a ``try``/``except`` that swallows a failure of the
extension build or call, a ``forward`` that never reaches the extension (so torch does the
work), and calls of the reference ``Model``. torch compute ops next to an extension call are
allowed (KernelBench lets a solution replace only some operators) and reported as warnings.
A ``.cu`` candidate must hold a ``__global__`` kernel and a ``PYBIND11_MODULE``. Kernel sources
of either kind that test names tiers 1 and 2 define differently (``macros``: the verifier's own
``CUSET_*`` names, one tier's flags, other headers' guards) are rejected with the line: tier 2 must
run the device code tier 1 compiled.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeGuard

from cuset_core.verify.candidate import Candidate
from cuset_core.verify.result import Diagnostic, Tier, Verdict, VerifyResult
from cuset_core.verify.source.macros import find_fingerprint

# Tier 0 treats sync and async definitions alike.
_Function = ast.FunctionDef | ast.AsyncFunctionDef
# torch calls that only allocate or describe tensors: glue, not work.
_TORCH_GLUE = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "tensor", "as_tensor", "from_numpy", "device", "no_grad", "enable_grad",
    "inference_mode", "is_tensor", "get_default_dtype", "Size", "finfo", "iinfo", "dtype",
    "manual_seed", "is_grad_enabled", "set_grad_enabled", "cuda", "randn", "rand", "randint",
}  # fmt: skip
# Tensor methods that compute (a denylist: unknown methods are presumed to be glue).
_TENSOR_WORK = {
    "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "conv1d", "conv2d", "conv3d", "sum",
    "mean", "var", "std", "prod", "max", "min", "amax", "amin", "argmax", "argmin", "softmax",
    "log_softmax", "logsumexp", "cumsum", "cumprod", "relu", "relu_", "gelu", "sigmoid", "tanh",
    "exp", "log", "sqrt", "rsqrt", "pow", "abs", "clamp", "clamp_", "clip", "norm", "add", "add_",
    "sub", "sub_", "mul", "mul_", "div", "div_", "sort", "topk", "masked_fill", "where", "tril",
    "triu", "diag", "addcmul", "lerp", "hardtanh", "softplus", "leaky_relu", "elu", "selu",
}  # fmt: skip
_TORCH_ROOTS = {"torch", "F", "nn", "functional"}
# Device memory outside torch's allocator escapes tier 3's cap (SandboxLimits.gpu_memory_mb), and
# looking CUDA entry points up by name or pasting tokens is how a source would hide such a call.
_RAW_DEVICE_MEMORY = re.compile(
    r"\b(cudaMalloc\w*|cudaHostAlloc|cuMemAlloc\w*|cuMemCreate|cuMemMap|cudaMemPoolCreate|dlopen|dlsym|"
    r"cudaGetDriverEntryPoint\w*|cuGetProcAddress\w*)\b|##"
)


@dataclass
class _Module:
    """What tier 0 needs to know about the candidate module's names."""

    tree: ast.Module
    functions: dict[str, _Function] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    ext_names: set[str] = field(default_factory=set)  # names bound to an extension or its ops
    ext_attrs: set[str] = field(default_factory=set)  # self.<attr> bound to one
    kernel_functions: set[str] = field(default_factory=set)  # names in functions=[...]
    torch_modules: set[str] = field(default_factory=set)  # self.<attr> = nn.Conv2d(...) etc.
    class_attrs: dict[str, str] = field(default_factory=dict)  # self.<attr> = LocalClass(...)


def check_static(candidate: Candidate) -> VerifyResult | None:
    """Tier 0 verdict for ``candidate``: a rejecting ``VerifyResult``, or None when it passes.

    Warnings found on a passing candidate are not returned here; see :func:`static_warnings`.
    """
    rejection, _ = _check(candidate)
    return rejection


def static_warnings(candidate: Candidate) -> list[Diagnostic]:
    """Non-fatal findings of tier 0 (torch compute ops next to extension calls)."""
    _, warnings = _check(candidate)
    return warnings


def _check(candidate: Candidate) -> tuple[VerifyResult | None, list[Diagnostic]]:
    code = candidate.code
    if not code.strip():
        return _reject(Verdict.NO_CODE, "the answer holds no code"), []
    if candidate.kind == "cu":
        return _check_cu(candidate), []
    if not candidate.fenced and not _looks_like_code(code):
        return _reject(Verdict.NO_CODE, "the answer holds no fenced code block"), []
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        line = _line(candidate, exc.lineno or 1)
        message = f"Python does not parse: {exc.msg}"
        return _reject(Verdict.STATIC_REJECT, f"line {line}: {message}", line, exc.offset), []
    return _check_python(candidate, tree)


def _looks_like_code(code: str) -> bool:
    return bool(re.search(r"\b(import|class|def|ModelNew|load_inline|__global__)\b", code))


def _line(candidate: Candidate, code_line: int) -> int:
    """Line in the candidate file (1-based) of line ``code_line`` of the scored code."""
    return candidate.text.count("\n", 0, candidate.sources.code_start) + code_line


def _reject(verdict: Verdict, reason: str, line: int | None = None, column: int | None = None) -> VerifyResult:
    diagnostic = Diagnostic(severity="error", message=reason, line=line, column=column)
    return VerifyResult(
        verdict=verdict, tier=Tier.STATIC, tiers_run=[Tier.STATIC], reason=reason,
        diagnostics=[diagnostic],
    )  # fmt: skip


def _raw_device_memory(source: str) -> str | None:
    """The first call in a CUDA/C++ ``source`` that would allocate device memory past tier 3's cap."""
    match = _RAW_DEVICE_MEMORY.search(source)
    if match is None:
        return None
    found = "token pasting (##)" if match.group(0) == "##" else match.group(0)
    return f"the kernel source uses {found}: device memory must come from torch (torch::empty), which tier 3 caps"


def _verifier_fingerprint(candidate: Candidate) -> VerifyResult | None:
    """A rejection, with its line, of kernel sources that test how the verifier builds them."""
    for ext in candidate.sources.extensions:
        for text, origin in ((ext.cuda, ext.cuda_map), (ext.cpp, ext.cpp_map)):
            found = find_fingerprint(text)
            if found is None:
                continue
            offset = origin.to_answer(found.offset)
            if offset is None:
                return _reject(Verdict.STATIC_REJECT, found.reason)
            line = candidate.text.count("\n", 0, offset) + 1
            return _reject(Verdict.STATIC_REJECT, f"line {line}: {found.reason}", line)
    return None


def _check_cu(candidate: Candidate) -> VerifyResult | None:
    code = candidate.code
    if (reason := _raw_device_memory(code)) is not None:
        return _reject(Verdict.STATIC_REJECT, reason)
    if (fingerprint := _verifier_fingerprint(candidate)) is not None:
        return fingerprint
    if "__global__" not in code:
        return _reject(Verdict.STATIC_REJECT, "no __global__ kernel in the CUDA source")
    if "PYBIND11_MODULE" not in code:
        return _reject(Verdict.STATIC_REJECT, "no PYBIND11_MODULE: the extension binds nothing")
    return None


def _check_python(candidate: Candidate, tree: ast.Module) -> tuple[VerifyResult | None, list[Diagnostic]]:
    module = _index(tree, candidate)
    model_new = module.classes.get("ModelNew")
    if model_new is None:
        return _reject(Verdict.STATIC_REJECT, "no class ModelNew"), []
    sources = candidate.sources
    if not sources.extensions:
        line = _line(candidate, model_new.lineno)
        return _reject(Verdict.STATIC_REJECT, "no load_inline call: nothing is compiled", line), []
    first_call = _line(candidate, _load_inline_calls(tree)[0].lineno)
    if sources.unresolved:
        reason = f"cannot resolve the kernel sources statically: {sources.unresolved[0]}"
        return _reject(Verdict.STATIC_REJECT, reason, first_call), []
    if not sources.has_kernel:
        return _reject(Verdict.STATIC_REJECT, "no __global__ kernel in the load_inline sources", first_call), []
    raw = _raw_device_memory("\n".join([sources.cuda, *(ext.cpp for ext in sources.extensions)]))
    if raw is not None:
        return _reject(Verdict.STATIC_REJECT, raw, first_call), []
    if (fingerprint := _verifier_fingerprint(candidate)) is not None:
        return fingerprint, []
    forward = _method(model_new, "forward")
    if forward is None:
        return _reject(Verdict.STATIC_REJECT, "ModelNew defines no forward", _line(candidate, model_new.lineno)), []
    swallowed = _swallowing_try(tree, module)
    if swallowed is not None:
        line = _line(candidate, swallowed.lineno)
        reason = f"line {line}: try/except around the extension build or call (a fallback)"
        return _reject(Verdict.STATIC_REJECT, reason, line), []
    reached = _reachable(module, model_new)
    inherits_reference = any(_dotted(base) == "Model" for base in model_new.bases)
    for function in [model_new, *reached]:
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and _calls_reference(node, inherits_reference and function is model_new):
                line = _line(candidate, node.lineno)
                return _reject(Verdict.STATIC_REJECT, f"line {line}: ModelNew calls the reference Model", line), []
    calls = [node for function in reached for node in ast.walk(function) if isinstance(node, ast.Call)]
    work = [(call, name) for call in calls if (name := _torch_work(call, module)) is not None]
    if not any(_is_kernel_call(call, module) for call in calls):
        detail = f"; torch does the work ({work[0][1]} on line {_line(candidate, work[0][0].lineno)})" if work else ""
        line = _line(candidate, forward.lineno)
        return _reject(Verdict.STATIC_REJECT, f"ModelNew.forward never calls the compiled extension{detail}", line), []
    warnings = [
        Diagnostic(severity="warning", message=f"torch op {name} runs next to the kernel in forward",
                   line=_line(candidate, call.lineno), column=call.col_offset + 1)
        for call, name in work
    ]  # fmt: skip
    return None, warnings


def _index(tree: ast.Module, candidate: Candidate) -> _Module:
    module = _Module(tree)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            module.functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            module.classes[node.name] = node
    for ext in candidate.sources.extensions:
        module.kernel_functions.update(ext.functions or ())
    builders = {name for name, fn in module.functions.items() if _returns_extension(fn)}
    # Bindings can chain (ext = load_inline(...); self.ext = ext; fn = self.ext.op): iterate to a fixpoint.
    for _ in range(4):
        for assign in ast.walk(tree):
            if isinstance(assign, (ast.Assign, ast.AnnAssign)) and assign.value is not None:
                targets = assign.targets if isinstance(assign, ast.Assign) else [assign.target]
                is_ext = _is_extension_expr(assign.value, module, builders)
                for target in targets:
                    _bind(target, assign.value, is_ext, module)
    return module


def _bind(target: ast.expr, value: ast.expr, is_ext: bool, module: _Module) -> None:
    attr = _self_attr(target)
    if isinstance(target, ast.Name) and is_ext:
        module.ext_names.add(target.id)
    elif attr is not None:
        if is_ext:
            module.ext_attrs.add(attr)
        elif isinstance(value, ast.Call):
            root = _dotted(value.func)
            if root and root.split(".")[0] in {"nn", "torch"}:
                module.torch_modules.add(attr)
            elif isinstance(value.func, ast.Name) and value.func.id in module.classes:
                module.class_attrs[attr] = value.func.id


def _returns_extension(function: _Function) -> bool:
    return any(
        isinstance(node, ast.Return) and node.value is not None and _is_load_inline(node.value)
        for node in ast.walk(function)
    )


def _is_extension_expr(value: ast.expr, module: _Module, builders: set[str]) -> bool:
    """Whether ``value`` evaluates to an extension module or one of its functions."""
    if _is_load_inline(value):
        return True
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        if value.func.id in builders:
            return True
        if value.func.id == "getattr":
            return _refers_to_extension(value, module)
    if isinstance(value, ast.Name):
        return value.id in module.ext_names
    if isinstance(value, ast.Attribute):
        return _refers_to_extension(value, module)
    return False


def _refers_to_extension(node: ast.expr, module: _Module) -> bool:
    """``ext``, ``self.ext``, ``ext.op``, ``self.ext.op``, ``getattr(ext, ...)``."""
    if isinstance(node, ast.Name):
        return node.id in module.ext_names or node.id in module.kernel_functions
    attr = _self_attr(node)
    if attr is not None:
        return attr in module.ext_attrs
    if isinstance(node, ast.Attribute):
        return node.attr in module.kernel_functions or _refers_to_extension(node.value, module)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
        return bool(node.args) and _refers_to_extension(node.args[0], module)
    return False


def _is_kernel_call(call: ast.Call, module: _Module) -> bool:
    """A call into the extension, or into a custom op it registered (``torch.ops.ns.op``)."""
    return _refers_to_extension(call.func, module) or _dotted(call.func).startswith("torch.ops.")


def _is_load_inline(node: ast.AST) -> TypeGuard[ast.Call]:
    return isinstance(node, ast.Call) and _dotted(node.func).split(".")[-1] == "load_inline"


def _load_inline_calls(tree: ast.Module) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if _is_load_inline(node)]


def _dotted(node: ast.expr) -> str:
    """``a.b.c`` for a Name/Attribute chain, else ''."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _self_attr(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _method(cls: ast.ClassDef, name: str) -> _Function | None:
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def _reachable(module: _Module, model_new: ast.ClassDef) -> list[_Function]:
    """``ModelNew.forward`` and every local function, method, sub-module ``forward`` and autograd
    ``Function.forward`` it calls, transitively."""
    start = _method(model_new, "forward")
    seen: list[_Function] = []
    stack: list[tuple[_Function, ast.ClassDef]] = [(start, model_new)] if start else []
    while stack:
        function, owner = stack.pop()
        if any(function is done for done in seen):
            continue
        seen.append(function)
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            stack.extend(_callees(call, owner, module))
    return seen


def _callees(call: ast.Call, owner: ast.ClassDef, module: _Module) -> Iterator[tuple[_Function, ast.ClassDef]]:
    func = call.func
    if isinstance(func, ast.Name) and func.id in module.functions:
        yield module.functions[func.id], owner
    attr = _self_attr(func)
    if attr is not None:
        method = _method(owner, attr)
        if method is not None:
            yield method, owner
        cls = module.classes.get(module.class_attrs.get(attr, ""))
        if cls is not None and (fwd := _method(cls, "forward")) is not None:
            yield fwd, cls
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        cls = module.classes.get(func.value.id)
        if cls is not None and func.attr in {"apply", "forward"}:
            if (fwd := _method(cls, "forward")) is not None:
                yield fwd, cls
    if isinstance(func, ast.Name) and func.id in module.classes:
        cls = module.classes[func.id]
        if (init := _method(cls, "__init__")) is not None:
            yield init, cls


def _calls_reference(node: ast.Call, inherits_reference: bool) -> bool:
    """``Model(...)``, or ``super().forward(...)`` in a ModelNew that subclasses ``Model``."""
    if isinstance(node.func, ast.Name) and node.func.id == "Model":
        return True
    func = node.func
    return (
        inherits_reference and isinstance(func, ast.Attribute) and func.attr == "forward"
        and isinstance(func.value, ast.Call) and _dotted(func.value.func) == "super"
    )  # fmt: skip


def _torch_work(call: ast.Call, module: _Module) -> str | None:
    """The name of the torch op ``call`` computes with, or None for glue and non-torch calls."""
    name = _dotted(call.func)
    root = name.split(".")[0] if name else ""
    if root in _TORCH_ROOTS and name not in {"torch", "F"}:
        last = name.split(".")[-1]
        if last in _TORCH_GLUE or name.startswith(("torch.cuda", "torch.utils", "torch.ops.")):
            return None
        return name
    attr = _self_attr(call.func)
    if attr is not None and attr in module.torch_modules:
        return f"self.{attr}"
    if isinstance(call.func, ast.Attribute) and call.func.attr in _TENSOR_WORK:
        if not _refers_to_extension(call.func, module):
            return f".{call.func.attr}()"
    return None


def _swallowing_try(tree: ast.Module, module: _Module) -> ast.Try | None:
    """A ``try`` whose body builds or calls the extension and whose handler does not re-raise."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try) or not node.handlers:
            continue
        guarded = any(
            _is_load_inline(inner) or (isinstance(inner, ast.Call) and _is_kernel_call(inner, module))
            for statement in node.body for inner in ast.walk(statement)
        )  # fmt: skip
        reraises = all(any(isinstance(n, ast.Raise) for n in ast.walk(h)) for h in node.handlers)
        if guarded and not reraises:
            return node
    return None
