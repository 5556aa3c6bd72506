"""Features of the compiled program: what nvcc's PTX for a candidate holds that tier 2 cannot run.

``unsupported`` is the verifier's word that tier 2 cannot judge a candidate, and pass@k leaves it
out of its denominators, so it must come from the program the compiler builds, never from names
in the text (issue 47, item 5): an x86 ``asm`` in host code, an identifier that contains
``cooperative_groups``, a variable named like a cuRAND call, the candidate's own ``namespace
thrust`` are no such feature. The text scan (``cpu.rewrite.unsupported_feature``) only says where
to look; :func:`ptx_confirms` compiles the CUDA sources as tier 1 does, to PTX with line
information (``nvcc -ptx -lineinfo``), and keeps the feature only where the PTX shows it:

- tensor cores: ``mma``/``wmma``/``wgmma``/``ldmatrix`` instructions;
- inline PTX: an ``asm`` block (``// begin inline asm``) whose line is in the candidate's own
  source, not in a CUDA header (``cuda_fp16.hpp`` implements intrinsics that way);
- cub, thrust, cooperative groups, cuRAND's device API: device code that comes from their headers
  (a ``.file`` of theirs, which PTX lists only for code it holds);
- textures and surfaces (``tex``/``suld``/``sust``/``.texref``), fp8/fp4 conversions, warp
  match/reduce (``match``/``redux``), half2 arithmetic the runtime lacks, async copies
  (``cp.async``, ``cp.async.bulk``: TMA), cluster barriers (``barrier.cluster``).

Host-side features (library calls such as cuBLAS, launches through the runtime API, CUDA graphs)
leave nothing in PTX: they are not decided here, and tier 2's build meets them (a missing header
is confirmed by ``cpu.claims``). Without nvcc the text scan stands as before.
"""

from __future__ import annotations

import re
from pathlib import Path
from tempfile import TemporaryDirectory

from cuset_core.verify.candidate import Candidate
from cuset_core.verify.compile import (
    _INLINE_CUDA_PRELUDE,
    CXX_STANDARD,
    TORCH_NVCC_FLAGS,
    include_dirs,
    nvcc_path,
)
from cuset_core.verify.sandbox import run_sandboxed
from cuset_core.verify.settings import VerifySettings

MAX_PTX_BYTES = 64 << 20

# What in PTX shows each feature of ``cpu.rewrite.UNSUPPORTED_FEATURES`` (by its name there).
_HEADER_FILE = r'^\s*\.file\s+\d+\s+"[^"\n]*{}'
EVIDENCE: dict[str, re.Pattern[str]] = {
    "tensor cores (wmma/mma)": re.compile(r"^\s*(?:@!?%\w+\s+)?(?:w?mma|wgmma|ldmatrix|stmatrix)\.", re.M),
    "cub": re.compile(_HEADER_FILE.format(r"/cub/"), re.M),
    "thrust": re.compile(_HEADER_FILE.format(r"/thrust/"), re.M),
    "cooperative groups": re.compile(_HEADER_FILE.format(r"cooperative_groups"), re.M),
    "textures/surfaces": re.compile(
        r"^\s*(?:@!?%\w+\s+)?(?:tex|tld4|suld|sust|sured|txq|suq)\.|\.texref|\.surfref", re.M
    ),
    "CUDA libraries (cuBLAS/cuDNN/cuRAND/...)": re.compile(_HEADER_FILE.format(r"/curand\w*\.h"), re.M),
    "fp8/fp4 types": re.compile(r"\.(?:e4m3|e5m2|e2m1|e2m3|e3m2|ue8m0)", re.M),
    "warp match/reduce intrinsics": re.compile(r"^\s*(?:@!?%\w+\s+)?(?:match|redux)\.", re.M),
    "half2 vector intrinsics": re.compile(r"^\s*(?:fma|max|min|ex2|div|rcp)\.[\w.]*f16x2", re.M),
    "async copies (cp.async/pipeline)": re.compile(
        r"^\s*(?:@!?%\w+\s+)?(?:cp\.async|cp\.reduce\.async|mbarrier)", re.M
    ),
}
CLUSTER = re.compile(r"^\s*barrier\.cluster|%cluster_", re.M)
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s", re.M)
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"\n]*)"', re.M)
_ASM = "// begin inline asm"


def ptx_confirms(feature: str, ptx: str) -> bool:
    """Whether ``ptx`` (with line information) shows ``feature``, named as the text scan names it."""
    if feature == "inline PTX (asm)":
        return _own_inline_asm(ptx)
    pattern = EVIDENCE.get(feature)
    return pattern is not None and pattern.search(ptx) is not None


def _own_inline_asm(ptx: str) -> bool:
    """An inline ``asm`` block whose line is in one of the candidate's sources (``extN.cu``)."""
    own = {number for number, name in _FILE.findall(ptx) if re.search(r"(?:^|/)ext\d+\.cu$", name)}
    for block in re.finditer(re.escape(_ASM), ptx):
        locs = _LOC.findall(ptx, 0, block.start())
        if locs and locs[-1] in own:
            return True
    return False


def candidate_ptx(candidate: Candidate, settings: VerifySettings) -> str | None:
    """The PTX of every extension's CUDA sources, compiled as tier 1 compiles them (``-ptx
    -lineinfo`` instead of ``-cubin``) in the sandbox; None without nvcc or when nvcc fails
    (then tier 1 blames the candidate for it)."""
    nvcc = nvcc_path()
    if nvcc is None:
        return None
    includes = [f"-I{folder}" for folder in include_dirs(settings.strict_headers, nvcc)]
    prelude = _INLINE_CUDA_PRELUDE if candidate.kind == "python" else ""
    pieces: list[str] = []
    with TemporaryDirectory(prefix="cuset-ptx-") as folder:
        workdir = Path(folder)
        for index, ext in enumerate(candidate.sources.extensions):
            if not ext.cuda.strip():
                continue
            (workdir / f"ext{index}_cuda.cu").write_text(f'{prelude}#line 1 "ext{index}.cu"\n{ext.cuda}\n')
            argv = [
                nvcc, "-ptx", "-lineinfo", f"-arch={settings.arch}", CXX_STANDARD, *TORCH_NVCC_FLAGS,
                f"-DTORCH_EXTENSION_NAME=cuset_ext{index}", "-DTORCH_API_INCLUDE_EXTENSION_H", *includes,
                "-o", f"ext{index}.ptx", f"ext{index}_cuda.cu",
            ]  # fmt: skip
            outcome = run_sandboxed(argv, workdir=workdir, limits=settings.limits)
            path = workdir / f"ext{index}.ptx"
            if not outcome.ok or not path.is_file() or path.is_symlink():
                return None
            with path.open("rb") as f:
                pieces.append(f.read(MAX_PTX_BYTES).decode("utf-8", errors="replace"))
    return "\n".join(pieces)


def confirmed_feature(candidate: Candidate, settings: VerifySettings, hinted: str | None) -> str | None:
    """``hinted`` (the text scan's feature) when the compiled program shows it, else None. A
    host-side feature, which PTX cannot show, is None too: tier 2's build and run meet it. Without
    nvcc the hint stands (the text scan was all there was before)."""
    if hinted is None:
        return None
    if nvcc_path() is None:
        return hinted
    if hinted != "inline PTX (asm)" and hinted not in EVIDENCE:
        return None
    try:
        ptx = candidate_ptx(candidate, settings)
    except Exception:  # noqa: BLE001 - the candidate's sources; tier 2's build then meets them
        return None
    if ptx is None:
        return None
    if ptx_confirms(hinted, ptx):
        return hinted
    # The scan names the first feature it finds; the program may hold another one.
    for feature in ["inline PTX (asm)", *EVIDENCE]:
        if ptx_confirms(feature, ptx):
            return feature
    return "cluster barriers" if CLUSTER.search(ptx) else None
