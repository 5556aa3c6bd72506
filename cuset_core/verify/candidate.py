"""A candidate solution as verification sees it: the scored code and its kernel sources."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cuset_core.analysis.extract import first_code_block
from cuset_core.analysis.sources import KernelSources, find_kernel_sources


@dataclass(frozen=True)
class Candidate:
    """A model's answer, a ``ModelNew`` Python file, or a standalone ``.cu`` torch extension.

    ``code`` is what gets scored: the first fenced block of an answer, or the whole text of a
    file that has no fence. ``kind`` is ``"python"`` (``ModelNew`` + ``load_inline``) or
    ``"cu"`` (``PYBIND11_MODULE`` extension whose ``forward`` is bound to the problem).
    """

    text: str
    code: str
    kind: str
    sources: KernelSources
    fenced: bool


def parse_candidate(text: str) -> Candidate:
    """Read a candidate without executing anything."""
    sources = find_kernel_sources(text)
    return Candidate(
        text=text,
        code=sources.code,
        kind=sources.language,
        sources=sources,
        fenced=first_code_block(text) is not None,
    )


_GLOBAL_KERNEL = re.compile(r"__global__\s+[\w:<>\s*]*?\b(\w+)\s*\(", re.S)
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")


def kernel_names(cuda_source: str) -> list[str]:
    """Names of the ``__global__`` functions defined in ``cuda_source``, in order."""
    names: list[str] = []
    for match in _GLOBAL_KERNEL.finditer(_LAUNCH_BOUNDS.sub(" ", cuda_source)):
        if match.group(1) not in names:
            names.append(match.group(1))
    return names
