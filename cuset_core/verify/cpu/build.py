"""Build a candidate's torch extension with g++ against the CPU torch wheel and the CuSeT runtime.

One translation unit per extension: the rewritten CUDA sources, then the C++ sources, then
(when ``functions`` is given, as ``load_inline`` does) the pybind11 bindings. The CUDA sources
see the macros nvcc's device pass defines for sm_90 (``DEVICE_PASS_MACROS``: ``__CUDACC__``,
``__CUDA_ARCH__`` = 900, ...), so their conditional compilation picks the device code tier 1
compiled; the C++ sources and bindings see none of them, as under ``load_inline``. Every compile
starts with ``-include`` of a precompiled prelude: the torch headers and the runtime. A
prelude is built once per (runtime, torch, compiler) and kept in the user's cache folder
(``prepare_preludes``, run by the trusted parent, never inside the sandbox).

Three preludes, tried in order; the first that builds the extension wins, and the report names
it. GCC instantiates a header's pending templates again in every unit that uses its precompiled
form, so the prelude's size sets the floor of every build:

- ``bridge``: no ATen at all. The light stand-in of the C++ API that tier 1 compiles against
  (``verify/stubs/light``), given definitions by ``runtime/cuset_torch_bridge.h``: tensors are
  handles to ``torch.Tensor`` objects and every torch operation runs through Python
  (``torch_bridge.py``). About a second per unit. What the bridge does not define is left as an
  undefined symbol, which fails this build (``_check_defined``) and moves on to
- ``light``: ATen's tensors, ops and factories and pybind11 (``torch/types.h``), about 60% of
- ``full``: ``torch/extension.h``, with the C++ frontend (``torch::nn``, optimizers, ...).

The light preludes shadow ``torch/extension.h`` and its siblings with themselves.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cuset_core.paths import CorePaths
from cuset_core.verify.cpu.rewrite import rewrite_source
from cuset_core.verify.source.preprocessor import NVCC_DEVICE_PASS

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
STUBS_DIR = Path(__file__).resolve().parent.parent / "stubs" / "light"
BRIDGE_MODULE = Path(__file__).resolve().parent / "torch_bridge.py"
PCH_NAME = "cuset_pch.h"
# The trusted runtime library, built into the bridge prelude's folder: the guarded, poisoning
# allocator and the switches the harness sets between runs. The candidate side loads it before the
# candidate.
RUNTIME_LIBRARY = "cuset_runtime.so"
RUNTIME_LIBRARY_SOURCES = ("guarded_allocator.cpp", "trial_switches.cpp", "device_port.cpp", "kernel_thread.cpp")
BRIDGE_OPS = "cuset_bridge_ops.inc"
# Namespaces of the stand-in: an undefined symbol of one of them is something the bridge lacks.
_STAND_IN_SYMBOL = re.compile(r"\b(?:at|c10|torch|pybind11|caffe2|cuset)::")
# A build of our own headers is bounded by the CPU time it may use, not by the wall clock: on a
# loaded machine (two busy cores, set-up at nice 10) the full prelude took over 600 s of wall time
# for a few minutes of CPU. The wall bound only ends a build that makes no progress at all.
BUILD_CPU_LIMIT_S = 900
BUILD_WALL_LIMIT_S = 3600.0
# -O1: the kernels run millions of fiber steps, -O2 costs build time for little gain here.
CXX_FLAGS = (
    "-std=c++20",
    "-O1",
    "-fPIC",
    "-fno-strict-aliasing",
    "-w",
    "-D_GLIBCXX_USE_CXX11_ABI=1",
    "-DTORCH_API_INCLUDE_EXTENSION_H",
)


# The architecture tier 2 models (the runtime's device properties are an sm_90 part's).
ARCH = "sm_90"
# What nvcc's device pass defines for ARCH (the table is the preprocessor module's, which reads
# candidates' conditions under it). They are defined after the precompiled prelude, so the torch
# headers and the runtime in it are built as plain C++.
DEVICE_PASS_MACROS = NVCC_DEVICE_PASS


@dataclass(frozen=True)
class Prelude:
    """The header every compile of one kind starts with, and the torch headers it stands in for.

    A ``bridge`` prelude compiles against the stand-in instead of torch's headers and links
    without torch's libraries."""

    name: str
    header: str
    shadows: tuple[str, ...] = ()
    bridge: bool = False

    @property
    def source(self) -> str:
        """The prelude's text: its header, and ``cuset_prelude()``, which names it in every library."""
        marker = f'extern "C" __attribute__((visibility("default"), weak, used)) const char* cuset_prelude() {{ return "{self.name}"; }}\n'
        return self.header + marker


LIGHT_TORCH = "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n"
PRELUDES = (
    Prelude("bridge", '#include "cuset_torch_bridge.h"\n#include "cuda_cpu.h"\n', bridge=True),
    Prelude(
        "light", LIGHT_TORCH + '#include "cuda_cpu.h"\n', shadows=("torch/extension.h", "torch/torch.h", "torch/all.h")
    ),
    Prelude("full", '#include <torch/extension.h>\n#include "cuda_cpu.h"\n'),
)
SHADOW_HEADER = (
    "#pragma once\n// CuSeT's light prelude stands in for this header; a candidate that needs more\n"
    "// of torch is rebuilt with the full torch/extension.h.\n" + LIGHT_TORCH
)


class BuildError(RuntimeError):
    """g++ rejected the candidate's sources; the message is the compiler's output (its end), and
    ``first_error`` the first ``error:`` line of it all, when there is one."""

    def __init__(self, message: str, first_error: str | None = None) -> None:
        super().__init__(message)
        self.first_error = first_error


_FIRST_ERROR = re.compile(r"^[^\n:]*:\d+:\d+: (?:fatal )?error: .*$", re.MULTILINE)
# Names of the headers the preludes differ in: an error that names one may be the prelude's.
_TORCH_NAME = re.compile(r"\b(?:torch|c10|aten|caffe2|pybind11|cuset)\b|\b(?:at|py)::")


@dataclass(frozen=True)
class Toolchain:
    """Where the compiler finds torch, Python and the runtime."""

    include_dirs: tuple[str, ...]
    library_dirs: tuple[str, ...]

    @property
    def include_flags(self) -> list[str]:
        """Runtime stand-ins first, so they shadow torch's CUDA-only headers."""
        return [f"-I{d}" for d in (str(RUNTIME_DIR / "include"), str(RUNTIME_DIR), *self.include_dirs)]

    @property
    def bridge_include_flags(self) -> list[str]:
        """The bridge's: the runtime, then the stand-in of torch's headers, then Python's; no torch."""
        folders = (RUNTIME_DIR / "include", RUNTIME_DIR, STUBS_DIR, sysconfig.get_paths()["include"])
        return [f"-I{d}" for d in folders]

    def flags_for(self, prelude: Prelude) -> list[str]:
        """Include flags of a compile on ``prelude``."""
        return self.bridge_include_flags if prelude.bridge else self.include_flags


@functools.cache
def toolchain() -> Toolchain:
    """Include and library folders of the installed torch and Python."""
    # A CUDA build of torch on a machine without a GPU logs "No CUDA runtime is found, using
    # CUDA_HOME=..." when this module is first imported: noise here, where only its folders are
    # read. Tier 3 imports it in its own process, where the warning stays.
    log = logging.getLogger("torch.utils.cpp_extension")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        from torch.utils.cpp_extension import include_paths, library_paths
    finally:
        log.setLevel(level)

    return Toolchain(
        include_dirs=(*include_paths(), sysconfig.get_paths()["include"]),
        library_dirs=tuple(library_paths()),
    )


def toolchain_digest(chain: Toolchain) -> str:
    """Hash of what every precompiled prelude depends on: the runtime, torch, compiler and flags."""
    import torch

    digest = hashlib.sha256()
    for path in sorted([*RUNTIME_DIR.rglob("*"), *STUBS_DIR.rglob("*"), BRIDGE_MODULE]):
        if path.is_file():
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    compiler = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout
    for part in (torch.__version__, compiler, " ".join(CXX_FLAGS), " ".join(chain.include_flags)):
        digest.update(part.encode())
    return digest.hexdigest()


def pch_key(toolchain_hash: str, prelude: Prelude) -> str:
    """Cache folder name of one prelude: a hash of the toolchain's hash and the prelude's text (and
    for the bridge prelude, the runtime library built into its folder)."""
    digest = hashlib.sha256()
    library = (RUNTIME_LIBRARY, *RUNTIME_LIBRARY_SOURCES) if prelude.bridge else ()
    for part in (toolchain_hash, prelude.source, *prelude.shadows, SHADOW_HEADER, *library):
        digest.update(part.encode())
    return f"{prelude.name}-{digest.hexdigest()[:16]}"


@functools.cache
def prepare_preludes() -> tuple[Path, ...]:
    """Folders of the precompiled preludes, lightest first; builds them on first use (~1-3 min each).

    Each folder holds ``cuset_pch.h``, its ``.gch`` and an ``include`` folder of the headers
    it shadows. Cached per process: the keys need torch's version and the compiler's, both
    slow to ask.
    """
    from concurrent.futures import ThreadPoolExecutor

    chain = toolchain()
    toolchain_hash = toolchain_digest(chain)
    # Each is one g++ process: on a first run they build side by side, one per core.
    root = CorePaths().cpu_pch
    with ThreadPoolExecutor(max_workers=len(PRELUDES)) as pool:
        built = [pool.submit(_prepare, chain, root / pch_key(toolchain_hash, p), p) for p in PRELUDES]
        return tuple(future.result() for future in built)


def runtime_library(preludes: Sequence[Path]) -> Path:
    """The trusted runtime library, built with the bridge prelude into its folder."""
    return next(folder / RUNTIME_LIBRARY for folder in preludes if prelude_named(folder).bridge)


def prelude_named(folder: Path) -> Prelude:
    """The prelude a prepared folder holds (its name is the folder's prefix)."""
    kind = folder.name.split("-", 1)[0]
    return next(prelude for prelude in PRELUDES if prelude.name == kind)


def bridge_ops() -> str:
    """``cuset_bridge_ops.inc``: the stand-in's any-argument methods and functions this torch runs."""
    from cuset_core.verify.cpu.torch_bridge import resolvable

    lines = []
    for list_file, macro, method in (
        ("cuset_tensor_methods.def", "CUSET_METHOD", True),
        ("cuset_torch_functions.def", "CUSET_FUNCTION", False),
    ):
        names = re.findall(rf"^{macro}\((\w+)\)", (STUBS_DIR / list_file).read_text(), flags=re.MULTILINE)
        lines += [f"{macro}({name})" for name in dict.fromkeys(names) if resolvable(name, method)]
    return "\n".join(lines) + "\n"


def _build_runtime_library(chain: Toolchain, folder: Path) -> None:
    """The trusted runtime library (``RUNTIME_LIBRARY_SOURCES`` of ``runtime/``) into ``folder``."""
    arguments = [
        "-shared",
        *CXX_FLAGS,
        *chain.include_flags,
        *[str(RUNTIME_DIR / source) for source in RUNTIME_LIBRARY_SOURCES],
        "-o",
        str(folder / RUNTIME_LIBRARY),
        *[f"-L{d}" for d in chain.library_dirs],
        *[f"-Wl,-rpath,{d}" for d in chain.library_dirs],
        "-lc10",
    ]
    done = _gxx(arguments)
    if done.returncode != 0:
        raise BuildError(f"building the runtime library failed:\n{done.stderr[-4000:]}")


def _gxx(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    """g++ with ``arguments`` (our own sources) under ``BUILD_CPU_LIMIT_S`` seconds of CPU (the
    shell's ``ulimit -t``: a ``preexec_fn`` is unsafe here, where threads build side by side)."""
    limited = ["sh", "-c", f'ulimit -t {BUILD_CPU_LIMIT_S} && exec g++ "$@"', "g++", *arguments]
    done = subprocess.run(limited, capture_output=True, text=True, timeout=BUILD_WALL_LIMIT_S)
    # Past the limit the kernel kills the compiler proper (cc1plus), and the g++ driver says so.
    if done.returncode != 0 and (done.returncode < 0 or "signal terminated program" in done.stderr):
        done.stderr += f"\ng++ was stopped after {BUILD_CPU_LIMIT_S} s of CPU time"
    return done


def _prepare(chain: Toolchain, folder: Path, prelude: Prelude) -> Path:
    if (folder / (PCH_NAME + ".gch")).is_file():
        _world_readable(folder)  # one built before the sandbox ran as a uid of its own
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    # One build per prelude at a time, across threads and processes: a service's workers (or an
    # eval's) that all start verifying at once each built every prelude side by side, and the full
    # one takes 1.4 GB of g++ (18 at once ran a 24 GB machine out of memory). The others wait for
    # it and then find it built.
    lock = os.open(folder.parent / f"{folder.name}.lock", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / (PCH_NAME + ".gch")).is_file():
            return folder
        return _build_prelude(chain, folder, prelude)
    finally:
        os.close(lock)


def _build_prelude(chain: Toolchain, folder: Path, prelude: Prelude) -> Path:
    staging = Path(tempfile.mkdtemp(prefix="building-", dir=folder.parent))
    _world_readable(staging)
    try:
        for shadow in prelude.shadows:
            path = staging / "include" / shadow
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(SHADOW_HEADER)
        if prelude.bridge:
            (staging / "include").mkdir(exist_ok=True)
            (staging / "include" / BRIDGE_OPS).write_text(bridge_ops())
            _build_runtime_library(chain, staging)
        header = staging / PCH_NAME
        header.write_text(prelude.source)
        arguments = [
            "-x",
            "c++-header",
            *CXX_FLAGS,
            f"-I{staging / 'include'}",
            *chain.flags_for(prelude),
            str(header),
            "-o",
            str(header) + ".gch",
        ]
        done = _gxx(arguments)
        if done.returncode != 0:
            raise BuildError(f"building the precompiled {prelude.name} prelude failed:\n{done.stderr[-4000:]}")
        try:
            staging.rename(folder)
        except OSError:  # another process finished first; its header is as good as ours
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _world_readable(folder: Path) -> None:
    """Let the sandbox's uid read a prelude folder (``mkdtemp`` makes it 0700)."""
    try:
        folder.chmod(0o755)
    except OSError:  # another user's folder: it is as readable as that user left it
        pass


def translation_unit(name: str, cuda: str, cpp: str, functions: list[str] | None, device_boundary: bool = False) -> str:
    """The single source file g++ compiles for one extension (its device checks left CUDA's behind
    the device boundary, see ``rewrite.rewrite_source``).

    It defines ``TORCH_EXTENSION_NAME`` itself: on g++'s command line the macro would come before
    the precompiled prelude, whose headers mention it, and g++ would then quietly parse the whole
    prelude again (about a second per build)."""
    parts = [f"#define TORCH_EXTENSION_NAME {name}"]
    if cuda:
        parts += [f"#define {macro} {value}" for macro, value in DEVICE_PASS_MACROS]
        parts += ['#line 1 "cuda_sources"', rewrite_source(cuda, device_boundary)]
        parts += [f"#undef {macro}" for macro, _ in DEVICE_PASS_MACROS]
    if cpp:
        parts += ['#line 1 "cpp_sources"', rewrite_source(cpp, device_boundary)]
    if functions:
        defs = "\n".join(f'  m.def("{f}", &{f}, "{f}");' for f in functions)
        parts.append(f"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{defs}\n}}")
    return "\n".join(parts) + "\n"


def compile_extension(
    name: str, source: str, workdir: Path, preludes: Sequence[Path], chain: Toolchain, extra_flags: tuple[str, ...] = ()
) -> Path:
    """Compile and link ``source`` into ``workdir/<name>.so`` with the first prelude that builds it
    (``built_with`` tells which).

    Raises ``BuildError`` with the last tried prelude's compiler output when none does. A compile
    error that two preludes meet alike and that names nothing of torch's (a typo in the kernel)
    is the candidate's own: the heavier preludes are not tried for it.
    """
    source_path = workdir / f"{name}.cpp"
    source_path.write_text(source)
    library = workdir / f"{name}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
    met_before: str | None = None
    for attempt, folder in enumerate(preludes, start=1):
        prelude = prelude_named(folder)
        try:
            _run(compile_command(source_path, workdir / f"{name}.o", folder, chain, extra_flags), workdir)
            _run(_link_command(workdir / f"{name}.o", library, chain, prelude), workdir)
            if prelude.bridge:
                _check_defined(library)
        except BuildError as exc:
            if attempt == len(preludes) or _candidates_own(exc.first_error, met_before):
                raise
            met_before = exc.first_error
            continue
        return library
    raise BuildError("no prelude to build with")


def compile_command(
    source: Path, obj: Path, folder: Path, chain: Toolchain, extra_flags: tuple[str, ...] = ()
) -> list[str]:
    """g++'s command line compiling ``source`` into ``obj`` on the precompiled prelude in ``folder``.

    Nothing here may define a macro the prelude's headers mention (g++ would not use the prelude:
    ``tests/unit/test_verify_cpu_preludes.py`` checks)."""
    return [
        "g++",
        "-Winvalid-pch",
        "-include",
        str(folder / PCH_NAME),
        *CXX_FLAGS,
        *extra_flags,
        f"-I{folder / 'include'}",
        *chain.flags_for(prelude_named(folder)),
        "-c",
        str(source),
        "-o",
        str(obj),
    ]


def built_with(library: Path) -> str:
    """The name of the prelude a loaded (or loadable) extension was built with: ``bridge``,
    ``light`` or ``full``. Loads the library."""
    import ctypes

    name = ctypes.CDLL(str(library)).cuset_prelude
    name.restype = ctypes.c_char_p
    return str(name().decode())


def _link_command(obj: Path, library: Path, chain: Toolchain, prelude: Prelude) -> list[str]:
    command = ["g++", "-shared", str(obj), "-o", str(library)]
    if prelude.bridge:  # Python's symbols come from the interpreter that loads it
        return command
    return [
        *command,
        *[f"-L{d}" for d in chain.library_dirs],
        *[f"-Wl,-rpath,{d}" for d in chain.library_dirs],
        "-lc10",
        "-ltorch",
        "-ltorch_cpu",
        "-ltorch_python",
    ]


def _check_defined(library: Path) -> None:
    """Fail a bridge build that uses a part of the C++ API the bridge does not define."""
    done = subprocess.run(["nm", "-D", "-C", "--undefined-only", str(library)], capture_output=True, text=True)
    missing = [line.split(None, 1)[-1] for line in done.stdout.splitlines() if _STAND_IN_SYMBOL.search(line)]
    if done.returncode != 0 or missing:
        raise BuildError("the torch bridge does not define: " + "; ".join(missing[:5]) or done.stderr)


def _candidates_own(error: str | None, met_before: str | None) -> bool:
    """Whether a compile ``error`` is the candidate's whatever the prelude: the previous prelude
    met the same one (same place, same words) and it names nothing of torch's."""
    return error is not None and error == met_before and not _TORCH_NAME.search(error.split(" error: ", 1)[1])


def _run(command: list[str], workdir: Path) -> None:
    done = subprocess.run(command, capture_output=True, text=True, cwd=workdir)
    if done.returncode != 0:
        first = _FIRST_ERROR.search(done.stderr)
        raise BuildError(done.stderr[-6000:] or done.stdout[-6000:], first.group(0) if first else None)


CU_EXTENSION = "cuset_cu_candidate"  # the extension name of a ``.cu`` candidate's build


def extension_module_name(cuda: str, cpp: str, functions: Sequence[str] | None) -> str:
    """Python module name (and library file stem) of an extension built from these sources: by what
    it is built from, never by the name the candidate gives it (the static analysis cannot always
    read it: a name built at run time) nor by its place (a candidate may build its extensions in
    another order than its source lists them). Equal sources share a name; different sources never
    share a library file, so a library built at run time cannot take the file, and behind the device
    boundary the device process's copy, of one built ahead from other sources."""
    sources = json.dumps([cuda, cpp, list(functions or ())])
    return f"cuset_ext_{hashlib.sha256(sources.encode()).hexdigest()[:16]}"


def unit_digest(unit: str) -> str:
    """sha256 (hex) of a translation unit: which prebuilt library belongs to which unit."""
    return hashlib.sha256(unit.encode()).hexdigest()


def kernel_short_name(demangled: str) -> str:
    """The name launches count a kernel under: ``void ns::k<float, (int)4>(float*, int)`` -> ``k``."""
    previous = None
    while previous != demangled:
        previous, demangled = demangled, re.sub(r"<[^<>]*>", "", demangled)
    names = re.findall(r"[A-Za-z_]\w*", demangled.split("(")[0])
    return names[-1] if names else ""


def set_kernel_resources(runtime: ctypes.CDLL, registers: dict[str, int], shared_bytes: dict[str, int]) -> None:
    """Hand tier 1's figures of each kernel to the trusted runtime library (``runtime/trial_switches.cpp``),
    before any launch: the runtime refuses launches a GPU would refuse for them (``cuda_cpu.h``)."""
    setter = runtime.cuset_set_kernel_resources
    setter.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_long]
    for name in {*registers, *shared_bytes}:
        setter(name.encode(), int(registers.get(name, 0)), int(shared_bytes.get(name, 0)))


def launch_counts(libraries: Iterable[ctypes.CDLL]) -> dict[str, int]:
    """Kernel launches by kernel name, summed over the runtimes of ``libraries`` (loaded
    extensions; a launch the runtime refused is not counted)."""
    counts: dict[str, int] = {}
    for library in libraries:
        report = library.cuset_launch_report
        report.restype = ctypes.c_char_p
        for kernel, count in json.loads(report().decode()).items():
            counts[kernel] = counts.get(kernel, 0) + count
    return counts


def launch_failure(libraries: Iterable[ctypes.CDLL]) -> str:
    """Why a launch failed in one of ``libraries``, when no ``cudaGetLastError()`` of the candidate
    consumed it (on a GPU the kernel would not have run); "" when none did."""
    for library in libraries:
        reason = library.cuset_launch_failure_reason
        reason.restype = ctypes.c_char_p
        text: str = reason().decode(errors="replace")
        if text:
            return text
    return ""
