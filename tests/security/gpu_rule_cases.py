"""What the suites of a GPU's run-time rules on tier 2 share (``test_misaligned_vectors.py``,
``test_stream_order.py``): candidates that add two vectors of ``cpu_cases/add_tail_problem.py`` with
one extension holding every variant, whose ``forward`` the test writes, run by tier 2 behind the
device boundary (the default)."""

from __future__ import annotations

from pathlib import Path

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.execution.library_cache import LibraryCache
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.result import Tier, VerifyResult
from cuset_core.verify.settings import SandboxLimits, VerifySettings

PROBLEM = (Path(__file__).parents[1] / "unit" / "cpu_cases" / "add_tail_problem.py").read_text()
SETTINGS = VerifySettings(tier=Tier.CPU, limits=SandboxLimits(wall_s=300, cpu_s=300))
REFERENCES = ReferencePool()


def candidate(extension: str, cuda: str, signatures: str, functions: list[str], forward: str) -> str:
    """A ``ModelNew`` whose ``forward(self, a, b)`` body is ``forward`` (``ext``: the extension)."""
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="{extension}", cpp_sources=r"""{signatures}""", cuda_sources=r"""{cuda}""",
                  functions={functions!r})


class ModelNew(nn.Module):
    def forward(self, a, b):
{forward}
'''


def tier2(code: str, libraries: LibraryCache) -> VerifyResult:
    """Tier 2's verdict on the candidate ``code``."""
    return run_cpu_tier(PROBLEM, parse_candidate(code), SETTINGS, libraries, REFERENCES)
