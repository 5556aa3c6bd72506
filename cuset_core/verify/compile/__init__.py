"""Tier 1: compile a candidate's extension with real nvcc for a real target, in the sandbox.

Each extension becomes up to two translation units, built as ``load_inline`` would build them:
the CUDA sources (after the includes ``load_inline`` adds) go through
``nvcc -cubin -arch=<arch> -Xptxas -v`` with torch's own nvcc flags and C++ standard, so the
front end checks host and device code and ptxas reports per-kernel resources; the C++ sources
plus the ``PYBIND11_MODULE`` that ``load_inline`` generates from ``functions=`` go through
``g++ -fsyntax-only``. By default the torch headers are a light stand-in (``stubs/light``,
about a second per unit), and each unit is first compiled with only the standard headers the
code names (``std_headers_named``; parsing the rest is most of a unit's time), then, if that
fails with an error that a left-out header could cause, with all of them; with
``settings.strict_headers`` they are the installed wheel's own, with stand-ins only for what a
CPU wheel lacks (``stubs/strict``). Both modes get ``stubs/common`` for the CUDA math libraries
missing here. ``#line`` directives name each source, so every diagnostic maps back to its line in
the candidate file through the source offset maps.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sysconfig
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from cuset_core.analysis.sources import InlineExtension, OffsetMap
from cuset_core.verify.candidate import Candidate
from cuset_core.verify.result import Diagnostic, KernelResources
from cuset_core.verify.sandbox import IsolationUnavailable, SandboxOutcome, describe, run_sandboxed
from cuset_core.verify.settings import SandboxLimits, VerifySettings

STUBS = Path(__file__).resolve().parent.parent / "stubs"  # verify/stubs, shared with tier 2's build
MAX_DIAGNOSTICS = 50
MAX_LOG_BYTES = 1 << 20  # compiler output read per unit
# The language standard torch.utils.cpp_extension (torch 2.10+) builds extensions with.
CXX_STANDARD = "-std=c++20"
# Flags torch.utils.cpp_extension passes to nvcc: they decide what half-precision code compiles.
TORCH_NVCC_FLAGS = (
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
)
# What load_inline puts before the CUDA sources of a Python candidate.
_INLINE_CUDA_PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"

_EDG = re.compile(
    r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?P<severity>catastrophic error|error|warning|remark)"
    r"(?: #[\w-]+)?: (?P<message>.*)$"
)
_GCC = re.compile(
    r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?:(?P<column>\d+):)? "
    r"(?P<severity>fatal error|error|warning|note): (?P<message>.*)$"
)
# An #include that names a file by absolute path, climbs out with "..", or is computed by a macro
# could make the compiler quote a file of the machine in its diagnostics.
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*(?:include|include_next|import|embed)\b[ \t]*(?P<target>.*)$", re.MULTILINE)
_SAFE_TARGET = re.compile(r'^(?:"(?P<q>[^"\n]*)"|<(?P<a>[^>\n]*)>)')
_TOOL_ERROR = re.compile(r"^(?P<tool>ptxas|nvcc|nvlink)\s*(?:error|fatal)\s*: (?P<message>.*)$")
_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)'")
_PROPERTIES = re.compile(r"Function properties for (?P<name>\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (?P<registers>\d+) registers(?P<rest>.*)$")


@dataclass(frozen=True)
class CompileReport:
    """What tier 1 found: ``ok`` when every unit compiled; ``seconds`` of wall time in all;
    ``command`` the compiler command lines (one per unit); ``log`` the compilers' output;
    ``timed_out`` when a compiler ran past the sandbox's wall-clock limit."""

    ok: bool
    diagnostics: list[Diagnostic]
    resources: list[KernelResources]
    seconds: float
    command: str
    log: str
    timed_out: bool = False


@dataclass(frozen=True)
class _Source:
    """One candidate source inside a unit: its ``#line`` file name, text and origin map."""

    file: str
    text: str
    origin: OffsetMap | None  # None: generated code, mapped to ``anchor``
    anchor: int | None = None  # answer offset that generated code is attributed to


@dataclass(frozen=True)
class _Unit:
    """One compiler run. ``first_try``: the same command with only the standard headers the code
    names (light stand-in only), tried before ``argv``; empty when there is nothing to try first."""

    path: Path
    argv: list[str]
    sources: tuple[_Source, ...]
    first_try: list[str] = field(default_factory=list)


# The standard headers real torch/extension.h brings in beyond what the light stand-in's own
# declarations need, and names of the std:: members that call for each. A name missing here only
# costs time: the unit then fails its first try and compiles again with every header.
_STD_ON_DEMAND = {
    "ALGORITHM": "min max minmax clamp min_element max_element sort stable_sort partial_sort nth_element fill "
    "fill_n copy copy_n copy_if transform reverse find find_if count count_if all_of any_of none_of for_each "
    "unique lower_bound upper_bound binary_search equal remove remove_if replace generate rotate merge",
    "FUNCTIONAL": "function bind hash plus minus multiplies divides greater less equal_to reference_wrapper "
    "ref cref invoke",
    "IOSTREAM": "cout cerr clog cin endl flush ostream istream ios",
    "MAP": "map multimap",
    "MEMORY": "unique_ptr shared_ptr weak_ptr make_unique make_shared allocator addressof",
    "NUMERIC": "accumulate iota inner_product partial_sum reduce gcd lcm",
    "SSTREAM": "stringstream ostringstream istringstream",
    "STRING": "string wstring basic_string string_view to_string stoi stol stoll stoul stoull stof stod stold "
    "getline exception runtime_error logic_error invalid_argument out_of_range domain_error length_error "
    "range_error overflow_error underflow_error",
    "UNORDERED_MAP": "unordered_map unordered_multimap",
}
_STD_NAME = re.compile(r"\bstd\s*::\s*(\w+)")
# A call by a bare name (not a member's, not another namespace's): argument-dependent lookup finds
# std's function of that name wherever the header that declares it is included, beside any of the
# candidate's own, so what compiles depends on the header (``sort(v.begin(), v.end())``).
_BARE_CALL = re.compile(r"(?<![\w.:])(?<!->)([A-Za-z_]\w*)\s*\(")
_LACKING_HEADER = re.compile(r"\bstd\b|incomplete type")
_HALF_NAME = re.compile(r"half|bf16|bfloat16|fp16|float16", re.IGNORECASE)
_USING_STD = re.compile(r"\busing\s+namespace\s+std\b")


def std_headers_named(code: str) -> list[str] | None:
    """The ``CUSET_STD_<HEADER>`` macros (see ``stubs/light/cuset_torch_light.h``) for the standard
    headers ``code`` names members of, as ``std::name`` or as a bare call ``name(...)`` (which
    argument-dependent lookup can resolve to std's, or find ambiguous with it), beyond those the
    stand-in always includes; None when it says ``using namespace std`` (its names cannot be told
    apart). ``CUSET_STD_UNORDERED_MAP`` also for the stand-in's ``saved_data`` map (autograd
    functions), ``CUSET_STD_HALF`` (CUDA's half-precision headers) for code that names a half or
    bfloat16 type."""
    if _USING_STD.search(code):
        return None
    named = set(_STD_NAME.findall(code)) | set(_BARE_CALL.findall(code))
    wanted = [header for header, names in _STD_ON_DEMAND.items() if named & set(names.split())]
    if "saved_data" in code and "UNORDERED_MAP" not in wanted:
        wanted.append("UNORDERED_MAP")
    if _HALF_NAME.search(code):  # CUDA's half-precision headers (and torch's types built on them)
        wanted.append("HALF")
    return [f"CUSET_STD_{header}" for header in wanted]


def nvcc_path() -> str | None:
    """The nvcc on PATH, or None."""
    return shutil.which("nvcc")


def compile_candidate(candidate: Candidate, settings: VerifySettings, workdir: Path) -> CompileReport:
    """Compile every extension of ``candidate`` in ``workdir`` (an empty folder it may fill)."""
    start = time.monotonic()
    nvcc = nvcc_path()
    if nvcc is None:
        diagnostic = Diagnostic(severity="error", message="nvcc is not on PATH: tier 1 cannot run")
        return CompileReport(False, [diagnostic], [], 0.0, "", "")
    refused = unsafe_includes(candidate)
    if refused:
        return CompileReport(False, refused, [], time.monotonic() - start, "", "")
    units = _units(candidate, settings, Path(workdir), nvcc)
    with ThreadPoolExecutor(max_workers=max(1, len(units))) as pool:
        runs = list(pool.map(lambda unit: _run_unit(unit, settings, Path(workdir)), units))
    outcomes = [outcome for outcome, _, _ in runs]
    diagnostics: list[Diagnostic] = []
    resources: list[KernelResources] = []
    logs: list[str] = []
    ok = True
    for unit, (outcome, output, argv) in zip(units, runs):
        logs.append(f"$ {shlex.join(argv)}\n{output}")
        unit_diagnostics = _diagnostics(output, unit, candidate)
        if not outcome.ok:
            ok = False
            if not any(d.severity == "error" for d in unit_diagnostics):
                message = f"{Path(argv[0]).name} {describe(outcome)}"
                unit_diagnostics.append(Diagnostic(severity="error", message=message))
        diagnostics.extend(unit_diagnostics)
        resources.extend(parse_resources(output))
    return CompileReport(
        ok=ok,
        diagnostics=_dedupe(diagnostics)[:MAX_DIAGNOSTICS],
        resources=resources,
        seconds=time.monotonic() - start,
        command="\n".join(shlex.join(argv) for _, _, argv in runs),
        log="\n".join(logs),
        timed_out=any(outcome.timed_out for outcome in outcomes),
    )


def unsafe_includes(candidate: Candidate) -> list[Diagnostic]:
    """Errors for ``#include`` directives that could reach a file outside the include folders:
    an absolute path, a ``..`` component, or a name computed by a macro; with their lines."""
    found = []
    for ext in candidate.sources.extensions:
        for text, origin in ((ext.cuda, ext.cuda_map), (ext.cpp, ext.cpp_map)):
            for match in _INCLUDE.finditer(text):
                target = match.group("target").strip()
                named = _SAFE_TARGET.match(target)
                name = (named.group("q") if named.group("q") is not None else named.group("a")) if named else None
                if name is not None and not name.startswith("/") and ".." not in Path(name).parts:
                    continue
                offset = origin.to_answer(match.start("target")) if origin is not None else None
                line = candidate.text.count("\n", 0, offset) + 1 if offset is not None else None
                message = (
                    f"#include {target[:80]}: only headers of the include folders may be included "
                    "(no absolute paths, '..' or computed names)"
                )
                found.append(Diagnostic(severity="error", message=message, line=line))
    return found


def include_dirs(strict: bool, nvcc: str) -> list[Path]:
    """Include folders for the torch headers (stand-in or real) and the stand-ins both need."""
    cuda_include = cuda_include_dir(nvcc)
    if not strict:
        return [STUBS / "light", STUBS / "common", cuda_include]
    from torch.utils.cpp_extension import include_paths

    python_include = Path(sysconfig.get_paths()["include"])
    return [*map(Path, include_paths()), python_include, STUBS / "strict", STUBS / "common", cuda_include]


def cuda_include_dir(nvcc: str) -> Path:
    """The CUDA toolkit's include folder: from CUDA_HOME/CUDA_PATH, next to nvcc, or the usual
    /usr/local/cuda (nvcc on PATH is often a wrapper script elsewhere)."""
    candidates = [Path(os.environ[v]) / "include" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    candidates += [Path(nvcc).resolve().parent.parent / "include", Path("/usr/local/cuda/include")]
    return next((c for c in candidates if (c / "cuda_runtime.h").is_file()), candidates[-1])


def _units(candidate: Candidate, settings: VerifySettings, workdir: Path, nvcc: str) -> list[_Unit]:
    includes = [f"-I{folder}" for folder in include_dirs(settings.strict_headers, nvcc)]
    code = "\n".join(part for ext in candidate.sources.extensions for part in (ext.cuda, ext.cpp))
    on_demand = std_headers_named(code) if settings.std_on_demand and not settings.strict_headers else None
    first_flags = [] if on_demand is None else ["-DCUSET_STD_ON_DEMAND", *(f"-D{macro}" for macro in on_demand)]
    units: list[_Unit] = []
    for index, ext in enumerate(candidate.sources.extensions):
        name = ext.name or f"cuset_ext{index}"
        defines = [f"-DTORCH_EXTENSION_NAME={_identifier(name)}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
        if ext.cuda.strip():
            prelude = _INLINE_CUDA_PRELUDE if candidate.kind == "python" else ""
            source = _Source(f"ext{index}.cu", ext.cuda, ext.cuda_map)
            path = workdir / f"ext{index}_cuda.cu"
            path.write_text(prelude + _with_line(source))
            argv = [
                nvcc, "-cubin", f"-arch={settings.arch}", "-Xptxas", "-v", CXX_STANDARD,
                *TORCH_NVCC_FLAGS, *defines, *includes, "-o", f"ext{index}.cubin", path.name,
            ]  # fmt: skip
            units.append(_Unit(path, argv, (source,), _first_try(argv, first_flags)))
        if candidate.kind == "python" and (ext.cpp.strip() or ext.functions):
            unit = _cpp_unit(ext, index, workdir, defines, includes)
            units.append(replace(unit, first_try=_first_try(unit.argv, first_flags)))
    return units


def _first_try(argv: list[str], flags: list[str]) -> list[str]:
    """``argv`` with ``flags`` after the compiler's name; nothing when there are no flags."""
    return [argv[0], *flags, *argv[1:]] if flags else []


def _cpp_unit(ext: InlineExtension, index: int, workdir: Path, defines: list[str], includes: list[str]) -> _Unit:
    """The host translation unit ``load_inline`` writes: its header, the C++ sources, bindings."""
    sources = [_Source(f"ext{index}.cpp", ext.cpp, ext.cpp_map)]
    if ext.functions:
        anchor = next((start for key, start, _ in ext.keyword_spans if key == "functions"), None)
        if anchor is None and ext.call_span is not None:
            anchor = ext.call_span[0]
        bindings = "\n".join(
            ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
            + [f'm.def("{f}", torch::wrap_pybind_function({f}), "{f}");' for f in ext.functions]
            + ["}"]
        )
        sources.append(_Source(f"ext{index}_bindings.cpp", bindings, None, anchor))
    path = workdir / f"ext{index}_main.cpp"
    path.write_text("#include <torch/extension.h>\n" + "\n".join(_with_line(s) for s in sources) + "\n")
    compiler = shutil.which("g++") or shutil.which("c++") or "g++"
    argv = [compiler, "-fsyntax-only", CXX_STANDARD, *defines, *includes, path.name]
    return _Unit(path, argv, tuple(sources))


def _with_line(source: _Source) -> str:
    return f'#line 1 "{source.file}"\n{source.text}\n'


def _identifier(name: str) -> str:
    return re.sub(r"\W", "_", name) or "cuset_ext"


def _run_unit(unit: _Unit, settings: VerifySettings, workdir: Path) -> tuple[SandboxOutcome, str, list[str]]:
    """Compile one unit: its first try when it has one, else (or when that fails other than by the
    time limit) its full command, whose outcome and output then stand alone. Returns the outcome,
    the compiler's output and the command that gave them."""
    if unit.first_try:
        outcome, output = _run(unit.first_try, unit, settings, workdir)
        if outcome.ok or outcome.timed_out or not _may_lack_a_header(output):
            return outcome, output, unit.first_try
    return (*_run(unit.argv, unit, settings, workdir), unit.argv)


def _may_lack_a_header(output: str) -> bool:
    """Whether a failed first try's errors could come from a standard header it left out: one
    names ``std`` or an incomplete type. Others (a typo in the kernel) are the candidate's under
    any headers, and compiling again would only repeat them."""
    return any("error" in line and _LACKING_HEADER.search(line) for line in output.splitlines())


def _run(argv: list[str], unit: _Unit, settings: VerifySettings, workdir: Path) -> tuple[SandboxOutcome, str]:
    """Run ``argv`` for ``unit``; its whole output goes to a file, because the sandbox keeps only
    the tail of a pipe and the first errors are the ones that matter."""
    log = workdir / f"{unit.path.stem}.log"
    argv = ["sh", "-c", 'exec "$@" > "$0" 2>&1', log.name, *argv]
    outcome = run_sandboxed(argv, workdir=workdir, limits=settings.limits)
    try:
        with log.open("rb") as f:
            output = f.read(MAX_LOG_BYTES).decode("utf-8", errors="replace")
    except OSError:
        output = ""
    return outcome, output + outcome.stdout + outcome.stderr


def _diagnostics(output: str, unit: _Unit, candidate: Candidate) -> list[Diagnostic]:
    """Compiler messages of one unit, with lines in the candidate file where they have one."""
    by_file = {source.file: source for source in unit.sources}
    diagnostics: list[Diagnostic] = []
    for raw in output.splitlines():
        line = raw.rstrip()
        match = _EDG.match(line) or _GCC.match(line)
        if match:
            severity = _severity(match.group("severity"))
            message = match.group("message").strip()
            source = by_file.get(match.group("file"))
            if source is None:
                if severity != "error":
                    continue  # warnings and notes inside the (torch) headers are not the candidate's
                message = f"{Path(match.group('file')).name}: {message}"
                diagnostics.append(Diagnostic(severity=severity, message=message))
                continue
            column = int(match.group("column")) if "column" in match.groupdict() and match.group("column") else None
            answer_line, answer_column = _answer_position(candidate, source, int(match.group("line")), column)
            diagnostics.append(Diagnostic(severity=severity, message=message, line=answer_line, column=answer_column))
            continue
        tool = _TOOL_ERROR.match(line)
        if tool:
            message = f"{tool.group('tool')}: {tool.group('message').strip()}"
            line_of_kernel = _kernel_line(message, unit, candidate)
            diagnostics.append(Diagnostic(severity="error", message=message, line=line_of_kernel))
    return diagnostics


def _severity(word: str) -> str:
    if "error" in word:
        return "error"
    return "warning" if word == "warning" else "note"


def _answer_position(
    candidate: Candidate, source: _Source, line: int, column: int | None
) -> tuple[int | None, int | None]:
    """Line and column in the candidate file of ``line``/``column`` (1-based) of ``source``."""
    if source.origin is None:
        offset = source.anchor
    else:
        offset = _origin_of_line(source, line, column)
    if offset is None:
        return None, None
    text = candidate.text
    answer_line = text.count("\n", 0, offset) + 1
    answer_column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return answer_line, answer_column if column is not None else None


def _origin_of_line(source: _Source, line: int, column: int | None) -> int | None:
    """Answer offset of a position in ``source``; the first mapped character of the line if
    that position itself came from nowhere (e.g. the newline joining two list items)."""
    lines = source.text.split("\n")
    if not 1 <= line <= len(lines):
        return None
    line_start = sum(len(text) + 1 for text in lines[: line - 1])
    line_end = line_start + len(lines[line - 1])
    first = line_start + (column - 1 if column else 0)
    assert source.origin is not None
    for index in [first, *range(line_start, line_end + 1)]:
        offset = source.origin.to_answer(index)
        if offset is not None:
            return offset
    return None


def _kernel_line(message: str, unit: _Unit, candidate: Candidate) -> int | None:
    """Line of the kernel a ptxas message names (``Entry function '_Z...'``), if found."""
    mangled = re.search(r"'(_Z\w+)'", message)
    if not mangled:
        return None
    name = _base_name(demangle([mangled.group(1)])[0])
    for source in unit.sources:
        found = re.search(rf"__global__[^;{{]*?\b{re.escape(name)}\s*\(", source.text)
        if found and source.origin is not None:
            line = source.text.count("\n", 0, found.start()) + 1
            return _answer_position(candidate, source, line, None)[0]
    return None


def _base_name(demangled: str) -> str:
    """``void ns::kernel<float>(float*, int)`` -> ``kernel``."""
    head = demangled.split("(")[0]
    head = re.sub(r"<.*>$", "", head)
    return head.split("::")[-1].split()[-1] if head.split() else head


def _dedupe(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[str, str, int | None]] = set()
    unique = []
    for d in diagnostics:
        key = (d.severity, d.message, d.line)
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return unique


def parse_resources(ptxas_output: str) -> list[KernelResources]:
    """Per-kernel resources from ``ptxas -v`` output (registers; shared, constant and stack
    bytes; spill stores and loads in bytes), kernel names demangled."""
    found: dict[str, dict[str, int]] = {}
    frames: dict[str, tuple[int, int, int]] = {}
    current: str | None = None
    properties_of: str | None = None
    for line in ptxas_output.splitlines():
        if entry := _ENTRY.search(line):
            current = entry.group("name")
            found.setdefault(current, {})
        elif props := _PROPERTIES.search(line):
            properties_of = props.group("name")
        elif (frame := _FRAME.search(line)) and properties_of is not None:
            frames[properties_of] = (int(frame.group(1)), int(frame.group(2)), int(frame.group(3)))
        elif (used := _USED.search(line)) and current is not None:
            rest = used.group("rest")
            smem = re.search(r"(\d+) bytes smem", rest)
            found[current] = {
                "registers": int(used.group("registers")),
                "shared_bytes": int(smem.group(1)) if smem else 0,
                "constant_bytes": sum(int(n) for n in re.findall(r"(\d+) bytes cmem\[\d+\]", rest)),
            }
    names = list(found)
    readable = demangle(names)
    resources = []
    for name, pretty in zip(names, readable):
        stack, spill_stores, spill_loads = frames.get(name, (0, 0, 0))
        resources.append(
            KernelResources(
                kernel=pretty, stack_bytes=stack, spill_store_bytes=spill_stores,
                spill_load_bytes=spill_loads, **found[name],
            )
        )  # fmt: skip
    return resources


def demangle(names: list[str]) -> list[str]:
    """C++ names demangled by ``c++filt`` in the sandbox (the names are the candidate's), else
    returned as they are (no ``c++filt``, or no sandbox here)."""
    if not names or shutil.which("c++filt") is None:
        return list(names)
    limits = SandboxLimits(wall_s=10, cpu_s=5, memory_mb=512, max_processes=8, file_size_mb=1, workdir_mb=1)
    try:
        with tempfile.TemporaryDirectory(prefix="cuset-demangle-") as folder:
            done = run_sandboxed(["c++filt"], workdir=Path(folder), limits=limits, stdin="\n".join(names).encode())
    except IsolationUnavailable:
        return list(names)
    lines = done.stdout.splitlines()
    return lines if done.ok and len(lines) == len(names) else list(names)
