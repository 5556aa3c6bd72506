"""Source rewrite that lets CUDA C++ compile with g++ against the CuSeT CPU runtime.

Every rewrite keeps the line structure (nothing adds or removes a newline), so compiler
diagnostics point at the candidate's own lines.

- ``kernel<T><<<grid, block, smem, stream>>>(args);`` becomes a ``cuset::launch`` call that
  counts the launch under the kernel's name and runs the grid on fibers (behind the device
  boundary, when the stream's order allows).
- ``extern __shared__ T name[];`` becomes a pointer to the block's dynamic shared buffer.
- ``__shared__`` declarations inside functions stay ``static`` (the runtime header defines
  ``__shared__`` as ``static``; blocks run one at a time, so one copy is per-block storage)
  and get a call that fills them with 0xFF at the start of each block.
- ``volatile T*`` becomes ``cuset::VolatilePtr<T>``, whose accesses keep a warp in lockstep.
- In device functions, a read-modify-write statement on an element (``a[i] += v``, ``*p -= v``,
  ``a[i].x *= v``, ``a[i]++``) becomes a ``cuset::rmw`` call, where the runtime can let the other
  threads of the block run between the load and the store (the racing trials): updates of one
  element by several threads without an atomic are then lost, as on a GPU.
- A ``__global__`` function declared with ``__launch_bounds__(N, ...)`` starts with
  ``if (cuset::launch_bounded(N)) return;``: a block of more than N threads is a launch the runtime
  refuses, as a GPU does (N is evaluated where the kernel's template arguments and macros are known).
- ``cudaFuncSetAttribute(kernel, ...)`` becomes ``cuset::func_set_attribute("kernel", kernel, ...)``:
  the runtime checks a launch's dynamic shared memory against the opt-in of the kernel of that name.
- Device checks and device constants of the torch API map to the CPU (``is_cuda()`` ->
  ``is_cpu()``, ``kCUDA`` -> ``kCPU``, ``"cuda"`` -> ``"cpu"``).
"""

from __future__ import annotations

import re

from cuset_core.verify.source.preprocessor import compiled_code, strip_comments

# (pattern, feature name) for what the runtime cannot model; the first match is reported.
UNSUPPORTED_FEATURES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bwmma::|<mma\.h>|\bmma\.sync|\bnvcuda::"), "tensor cores (wmma/mma)"),
    (re.compile(r"\basm\s*(?:volatile\s*)?\(|\b__asm__\b"), "inline PTX (asm)"),
    (re.compile(r"\bcub::|<cub/"), "cub"),
    (re.compile(r"\bthrust::|<thrust/"), "thrust"),
    (re.compile(r"cooperative_groups"), "cooperative groups"),
    (
        re.compile(
            r"\btex[123]D\w*\s*[<(]|\bcudaTextureObject_t\b|\btexture\s*<|\bsurf[123]D\w*\s*[<(]|cudaSurfaceObject_t"
        ),
        "textures/surfaces",
    ),
    (
        re.compile(
            r"\bcublas\w*|\bcudnn\w*|\bcusparse\w*|\bcusolver\w*|\bcufft\w*|\bcurand\w*|getCurrentCUDABlasHandle"
        ),
        "CUDA libraries (cuBLAS/cuDNN/cuRAND/...)",
    ),
    (re.compile(r"\b__nv_fp8|cuda_fp8\.h|\b__nv_fp4"), "fp8/fp4 types"),
    (
        re.compile(r"\bcudaLaunchKernel\b|\bcudaLaunchCooperativeKernel\b|\bcuLaunchKernel\b"),
        "launch through the driver/runtime API",
    ),
    (re.compile(r"\bcudaGraph\w*"), "CUDA graphs"),
    (re.compile(r"\b__match_(?:any|all)_sync\b|\b__reduce_\w+_sync\b"), "warp match/reduce intrinsics"),
    (re.compile(r"\b__hfma2|\b__h2div|\bh2exp\b|\b__hmax2|\b__hmin2"), "half2 vector intrinsics"),
    (
        re.compile(r"\bcp\.async|__pipeline_memcpy_async|\bcuda::memcpy_async|<cuda/pipeline>|<cuda/barrier>"),
        "async copies (cp.async/pipeline)",
    ),
)

_LAUNCH = re.compile(r"([A-Za-z_][\w:]*)\s*(<(?:[^<>;]|<[^<>;]*>)*>)?\s*<<<")
_EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+((?:__align__\s*\(\s*\d+\s*\)\s*)?)([^;\[\]]*?)\s*\b([A-Za-z_]\w*)\s*\[\s*\]\s*;"
)
_SHARED_DECL = re.compile(r"(?<![\w])__shared__\s+[^;(){}]*;")
_DEVICE_FUNCTION = re.compile(r"\b__(?:global|device)__\b")
_GLOBAL_FUNCTION = re.compile(r"\b__global__\b")
_LAUNCH_BOUNDS = re.compile(r"\b__launch_bounds__\s*\(")
# An element of memory another thread may update too: a[i], a[i][j], a[i].x, *p. Not a member
# reached through another object (s.a[i], s->a[i], ns::a[i]): those are left as written.
_ELEMENT = r"(?:\*\s*[A-Za-z_]\w*|[A-Za-z_]\w*(?:\s*\[[^\[\];]*(?:\[[^\[\];]*\][^\[\];]*)*\])+(?:\.[A-Za-z_]\w*)?)"
_RMW_TARGET = re.compile(
    rf"(?<![\w.>:\]])(?:(?P<pre>\+\+|--)\s*)?(?P<lhs>{_ELEMENT})\s*"
    r"(?:(?P<op><<|>>|[-+*/%&|^])=(?!=)|(?P<post>\+\+|--))?"
)
_VOLATILE_PTR = re.compile(r"\bvolatile\s+((?:(?:unsigned|signed|long|short|const)\s+)*[A-Za-z_][\w:]*)\s*\*\s*")
_CUDA_STRING = re.compile(r"\"cuda(?::\d+)?\"")
_FUNC_SET_ATTRIBUTE = re.compile(r"\bcudaFuncSetAttribute\s*\(")
_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")
_NOT_A_KERNEL = {"const", "void", "reinterpret_cast", "static_cast", "const_cast", "decltype"}


def unsupported_feature(source: str, *, cuda: bool = True) -> str | None:
    """The first feature of ``source`` the CPU runtime cannot model, or None.

    Only code the compiler compiles counts (``preprocessor.compiled_code``; ``cuda``: nvcc compiles
    ``source``, else g++): a feature named in a comment, a string literal or a group the
    preprocessor skips (``#if 0``) must not make a wrong kernel ``unsupported``, a verdict pass@k
    leaves out of its denominators."""
    code = compiled_code(source, cuda=cuda)
    for pattern, name in UNSUPPORTED_FEATURES:
        if pattern.search(code):
            return name
    return None


def _matching(text: str, start: int, open_ch: str, close_ch: str) -> int:
    """Index of the bracket closing the one at ``start``, or -1."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
    return -1


def split_top_level(text: str) -> list[str]:
    """Split ``text`` at commas outside brackets; empty text gives no items."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    tail = "".join(current)
    if tail.strip() or parts:
        parts.append(tail)
    return parts


def rewrite_launches(code: str) -> str:
    """Replace every ``k<<<cfg>>>(args)`` with a ``cuset::launch`` call (same lines)."""
    out: list[str] = []
    pos = 0
    for match in _LAUNCH.finditer(code):
        if match.start() < pos:
            continue
        config_start = match.end()
        config_end = code.find(">>>", config_start)
        if config_end < 0:
            continue
        paren = config_end + 3
        while paren < len(code) and code[paren] in " \t\r\n":
            paren += 1
        if paren >= len(code) or code[paren] != "(":
            continue
        close = _matching(code, paren, "(", ")")
        if close < 0:
            continue
        name = match.group(1)
        template = match.group(2) or ""
        config = split_top_level(code[config_start:config_end])
        grid, block = config[0], config[1] if len(config) > 1 else "1"
        smem = config[2] if len(config) > 2 else "0"
        stream = config[3] if len(config) > 3 else "0"
        args = code[paren + 1 : close]
        short = name.split("::")[-1]
        body = f"[](auto&&... cuset_a) {{ {name}{template}(cuset_a...); }}"
        call = (
            f'cuset::launch("{short}", dim3({grid}), dim3({block}), (size_t)({smem}), (cudaStream_t)({stream}), {body}'
        )
        call += f", {args})" if args.strip() else ")"
        # Keep the newlines of the original statement so later lines keep their numbers.
        original = code[match.start() : close + 1]
        call += "\n" * (original.count("\n") - args.count("\n"))
        out.append(code[pos : match.start()])
        out.append(call)
        pos = close + 1
    out.append(code[pos:])
    return "".join(out)


def rewrite_extern_shared(code: str) -> str:
    """``extern __shared__ T name[];`` -> a pointer to the block's dynamic shared buffer. Its
    initialiser is an address the loader fixes, so at file scope it needs no constructor (the device
    process runs none)."""

    def replace(match: re.Match[str]) -> str:
        ctype, name = match.group(2).strip(), match.group(3)
        return f"{ctype}* {name} = reinterpret_cast<{ctype}*>(cuset::detail::dynamic_shared_storage);"

    return _EXTERN_SHARED.sub(replace, code)


def _code_brace_depths(code: str) -> list[bool]:
    """For every character: whether it lies inside a function body (a brace after ``)``...)."""
    inside = [False] * (len(code) + 1)
    stack: list[bool] = []
    last_token = ""
    for i, ch in enumerate(code):
        if ch == "{":
            opener = stack[-1] if stack else False
            stack.append(opener or last_token in (")", "else", "do", "try", "const", "noexcept", "]", "=", "mutable"))
        elif ch == "}":
            if stack:
                stack.pop()
        inside[i] = bool(stack and stack[-1])
        if not ch.isspace():
            if ch.isalnum() or ch == "_":
                last_token = last_token + ch if last_token[-1:].isalnum() or last_token[-1:] == "_" else ch
            else:
                last_token = ch
    return inside


def poison_static_shared(code: str) -> str:
    """Add a per-block 0xFF fill after each ``__shared__`` declaration inside a function."""
    inside = _code_brace_depths(code)
    out: list[str] = []
    pos = 0
    counter = 0
    for match in _SHARED_DECL.finditer(code):
        if not inside[match.start()] or code[max(0, match.start() - 20) : match.start()].rstrip().endswith("extern"):
            continue
        declaration = match.group(0)
        names = _declared_names(declaration[len("__shared__") : -1])
        fills = []
        for name in names:
            counter += 1
            seen = f"cuset_shared_seen_{counter}"
            fills.append(
                f"static unsigned long long {seen} = 0; cuset::poison_shared(&{name}, sizeof({name}), {seen});"
            )
        out.append(code[pos : match.end()])
        out.append(" " + " ".join(fills))
        pos = match.end()
    out.append(code[pos:])
    return "".join(out)


def _declared_names(declarators: str) -> list[str]:
    """Variable names declared in ``T a[4], b`` (the part after ``__shared__``)."""
    names = []
    for index, part in enumerate(split_top_level(declarators)):
        head = part.split("[")[0].split("=")[0].strip()
        found = re.findall(r"[A-Za-z_]\w*", head)
        if found and (index > 0 or len(found) > 1):
            names.append(found[-1])
    return [name for name in names if name not in ("volatile", "const")]


def rewrite_volatile_pointers(code: str) -> str:
    """``volatile T*`` -> ``cuset::VolatilePtr<T>`` (warp-synchronous accesses in lockstep)."""
    return _VOLATILE_PTR.sub(lambda m: f"cuset::VolatilePtr<{m.group(1).replace('const ', '')}> ", code)


def kernel_name(expression: str) -> str:
    """The kernel a function-pointer expression names: ``(const void*)ns::k<float, 4>`` -> ``k``."""
    previous = None
    while previous != expression:
        previous, expression = expression, _TEMPLATE_ARGS.sub("", expression)
    names = [name for name in re.findall(r"[A-Za-z_]\w*", expression) if name not in _NOT_A_KERNEL]
    return names[-1] if names else ""


def rewrite_func_attributes(code: str) -> str:
    """``cudaFuncSetAttribute(k, ...)`` -> ``cuset::func_set_attribute("k", k, ...)`` (same lines)."""
    out: list[str] = []
    pos = 0
    for match in _FUNC_SET_ATTRIBUTE.finditer(code):
        close = _matching(code, match.end() - 1, "(", ")")
        arguments = split_top_level(code[match.end() : close]) if close >= 0 else []
        if not arguments:
            continue
        out.append(code[pos : match.start()])
        out.append(f'cuset::func_set_attribute("{kernel_name(arguments[0])}", ')
        pos = match.end()
    out.append(code[pos:])
    return "".join(out)


def rewrite_torch_device(code: str) -> str:
    """Map torch's CUDA device checks and constants to the CPU."""
    code = re.sub(r"\.is_cuda\(\)", ".is_cpu()", code)
    code = re.sub(r"\bkCUDA\b", "kCPU", code)
    code = re.sub(r"\bDeviceType::CUDA\b", "DeviceType::CPU", code)
    code = re.sub(r"\.cuda\(\)", ".cpu()", code)
    return _CUDA_STRING.sub('"cpu"', code)


def device_bodies(code: str) -> list[tuple[int, int]]:
    """``[start, end)`` of the body of every ``__global__`` or ``__device__`` function (not of
    ``__device__`` variables: those reach a ``;`` before any brace)."""
    spans: list[tuple[int, int]] = []
    for match in _DEVICE_FUNCTION.finditer(code):
        depth, i = 0, match.end()
        while i < len(code):
            ch = code[i]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif depth == 0 and ch == ";":
                break
            elif depth == 0 and ch == "{":
                end = _matching(code, i, "{", "}")
                if end > 0 and not (spans and spans[-1][1] > i):
                    spans.append((i, end + 1))
                break
            i += 1
    return spans


def _statement_end(code: str, start: int, limit: int) -> int:
    """Index of the ``;`` ending the statement that continues at ``start`` (outside brackets), or -1."""
    depth = 0
    for i in range(start, limit):
        ch = code[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return -1
        elif ch == ";" and depth == 0:
            return i
    return -1


def _starts_statement(code: str, start: int) -> bool:
    """Whether a statement can begin at ``start`` (after ``;``, a brace, a condition's ``)``,
    ``else`` or ``do``), so that rewriting the expression there cannot change a larger one."""
    before = code[:start].rstrip()
    return not before or before[-1] in ";{})" or re.search(r"\b(?:else|do)$", before) is not None


def rewrite_racing_updates(code: str) -> str:
    """In device functions, ``LHS op= RHS;`` and ``LHS++;`` (and ``--``, prefix or postfix) on an
    element of an array or pointer become ``cuset::rmw(LHS, (RHS), op);`` (same lines)."""
    edits: list[tuple[int, int, str]] = []
    for body_start, body_end in device_bodies(code):
        for match in _RMW_TARGET.finditer(code, body_start, body_end):
            if not _starts_statement(code, match.start()):
                continue
            lhs, rest = match.group("lhs"), match.end()
            if op := match.group("op"):
                end = _statement_end(code, rest, body_end)
                if end < 0:
                    continue
                update = f"[](auto& cuset_a, auto&& cuset_b) {{ cuset_a {op}= cuset_b; }}"
                edits.append((match.start(), end, f"cuset::rmw({lhs}, ({code[rest:end]}), {update})"))
            elif match.group("pre") or match.group("post"):
                step = match.group("pre") or match.group("post")
                end = _statement_end(code, rest, body_end)
                if end < 0 or code[rest:end].strip():
                    continue
                update = f"[](auto& cuset_a, int) {{ {step}cuset_a; }}"
                edits.append((match.start(), end, f"cuset::rmw({lhs}, 0, {update})"))
    for start, end, text in reversed(edits):
        code = code[:start] + text + code[end:]
    return code


def rewrite_launch_bounds(code: str) -> str:
    """``__global__ ... __launch_bounds__(N, ...) k(...) {`` -> the same with
    ``if (cuset::launch_bounded((N))) return;`` first in the body (same lines)."""
    edits: list[tuple[int, str]] = []
    for match in _GLOBAL_FUNCTION.finditer(code):
        depth, i = 0, match.end()
        bound: str | None = None
        while i < len(code):
            ch = code[i]
            if depth == 0 and (found := _LAUNCH_BOUNDS.match(code, i)):
                close = _matching(code, found.end() - 1, "(", ")")
                arguments = split_top_level(code[found.end() : close]) if close > 0 else []
                if arguments and arguments[0].strip():
                    bound = " ".join(arguments[0].split())
                i = max(close, found.end())
            elif ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif depth == 0 and ch == ";":
                break
            elif depth == 0 and ch == "{":
                if bound is not None:
                    edits.append((i + 1, f" if (cuset::launch_bounded(({bound}))) return;"))
                break
            i += 1
    for at, text in reversed(edits):
        code = code[:at] + text + code[at:]
    return code


def rewrite_source(code: str, device_boundary: bool = False) -> str:
    """All rewrites, in the order they must apply, for one CUDA or C++ source. Behind the device
    boundary, torch's device checks and constants stay CUDA's: its device tensors say "cuda"."""
    code = strip_comments(code)
    code = rewrite_launch_bounds(code)
    code = rewrite_extern_shared(code)
    code = poison_static_shared(code)
    code = rewrite_volatile_pointers(code)
    code = rewrite_racing_updates(code)
    code = rewrite_launches(code)
    code = rewrite_func_attributes(code)
    return code if device_boundary else rewrite_torch_device(code)
