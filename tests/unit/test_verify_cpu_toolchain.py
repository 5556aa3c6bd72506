"""Tier 2 reads torch's header and library folders without torch's CUDA_HOME warning: on a machine
without a GPU a CUDA build of torch logs "No CUDA runtime is found, using CUDA_HOME=..." when
``torch.utils.cpp_extension`` is first imported, which printed on every ``cuset verify``."""

from __future__ import annotations

import subprocess
import sys

# A CUDA build of torch on a machine with a CUDA toolkit and no GPU, as far as cpp_extension asks.
AS_A_CUDA_BUILD = """
import torch
torch.cuda._is_compiled = lambda: True
torch.version.cuda = "12.4"
torch.cuda.is_available = lambda: False
"""


def _stderr(code: str, cuda_home) -> str:
    env = {"CUDA_HOME": str(cuda_home), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", AS_A_CUDA_BUILD + code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_the_cpu_tiers_toolchain_is_read_without_the_cuda_home_warning(tmp_path):
    warned = _stderr("import torch.utils.cpp_extension", tmp_path)
    assert "No CUDA runtime is found" in warned  # what the user saw, reproduced

    quiet = _stderr(
        "from cuset_core.verify.cpu.build import toolchain\n"
        "chain = toolchain()\n"
        "import torch.utils.cpp_extension as ext\n"
        "assert chain.include_dirs and ext.CUDA_HOME is not None\n",
        tmp_path,
    )
    assert "CUDA_HOME" not in quiet, quiet


def test_a_build_is_bounded_by_cpu_time_not_by_the_wall_clock(tmp_path, monkeypatch):
    # A set-up at nice 10 on two busy cores took over 600 s of wall time to build the full
    # prelude, a few minutes of CPU: the wall-clock timeout stopped it and the demo with it.
    from cuset_core.verify.cpu import build

    endless = tmp_path / "endless.cpp"
    endless.write_text(
        "constexpr long sum() { long s = 0; for (long i = 0; i < (1L << 40); ++i) s += i; return s; }\n"
        "static_assert(sum() > 0);\n"
    )
    monkeypatch.setattr(build, "BUILD_CPU_LIMIT_S", 1)
    limits = ["-fconstexpr-ops-limit=4611686018427387904", "-fconstexpr-loop-limit=2147483647"]
    done = build._gxx(["-fsyntax-only", *limits, str(endless)])
    assert done.returncode != 0 and done.stderr.endswith("g++ was stopped after 1 s of CPU time"), done.stderr
    assert build._gxx(["--version"]).returncode == 0
