"""The judge's own check of an ``unsupported`` claim from tier 2's candidate side.

The candidate side reports ``unsupported`` when g++ finds no header the candidate includes
(``header <cub/cub.cuh>``): the runtime has no stand-in for it. That process is the candidate's,
so the claim is only a hint: the verdict is ``unsupported`` when the verifier's own analysis
agrees (the candidate's statically known sources include that header in code the compiler
compiles: not in a comment or a group the preprocessor skips, ``preprocessor.compiled_code``; and
no folder of the compiler's search path holds it), else the candidate's ``runtime_error``.
Features the runtime cannot model are found before the candidate runs (``run_cpu_tier``), so
any other claim is refused.
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from cuset_core.verify.candidate import Candidate
from cuset_core.verify.cpu.build import Toolchain
from cuset_core.verify.source.preprocessor import compiled_code

_HEADER_CLAIM = re.compile(r"header <([\w][\w./+-]*)>")


def unsupported_confirmer(candidate: Candidate, chain: Toolchain) -> Callable[[str | None], str | None]:
    """``TierSpec.confirm_unsupported`` for ``candidate``: the claimed feature when the judge finds
    it, else None."""
    extensions = candidate.sources.extensions
    # Each source as its compiler sees it: nvcc the CUDA sources, g++ load_inline's C++ sources.
    text = "\n".join(
        [*(compiled_code(ext.cuda) for ext in extensions), *(compiled_code(ext.cpp, cuda=False) for ext in extensions)]
    )

    def confirm(claimed: str | None) -> str | None:
        match = _HEADER_CLAIM.fullmatch(claimed or "")
        if match is None or ".." in match.group(1).split("/"):
            return None
        header = match.group(1)
        included = re.search(rf'^[ \t]*(?:#|%:)[ \t]*include\s*[<"]{re.escape(header)}[>"]', text, re.MULTILINE)
        return f"header <{header}>" if included and not _on_search_path(header, chain) else None

    return confirm


def _on_search_path(header: str, chain: Toolchain) -> bool:
    """Whether a folder g++ searches (the runtime's stand-ins, torch, Python, the system's) holds
    ``header``; True when the compiler's own folders cannot be listed (the claim is then refused)."""
    system = compiler_include_dirs()
    folders = [flag.removeprefix("-I") for flag in chain.include_flags] + list(system)
    return not system or any((Path(folder) / header).is_file() for folder in folders)


@functools.cache
def compiler_include_dirs() -> tuple[str, ...]:
    """The folders g++ searches for ``#include <...>`` by default (as ``g++ -E -v`` lists them)."""
    try:
        listing = subprocess.run(
            ["g++", "-x", "c++", "-E", "-v", "/dev/null"], capture_output=True, text=True, timeout=60
        ).stderr
    except (OSError, subprocess.TimeoutExpired):
        return ()
    start, end = listing.find("#include <...> search starts here:"), listing.find("End of search list.")
    if start < 0 or end < start:
        return ()
    return tuple(line.strip() for line in listing[start:end].splitlines()[1:] if line.strip())
