"""Verification settings: data, validated at the edge, part of the cache key."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cuset_core.verify.policy import Policy
from cuset_core.verify.result import Tier

ToleranceProfile = Literal["kernelbench", "v0"]
# atol = rtol per output dtype. "kernelbench" is KernelBench's current rule (torchbench's values):
# 1e-4 for fp32, 1e-2 for fp16/bf16; "v0" is KernelBench v0/v0.1's 1e-2 for every dtype, loose
# enough for an fp32 kernel that skips one of 4,096 summed elements to pass.
HALF_DTYPES = ("float16", "bfloat16")
PROFILE_TOLERANCE = {"kernelbench": (1e-4, 1e-2), "v0": (1e-2, 1e-2)}  # (fp32 and others, fp16/bf16)

# The knobs an evaluation shares with the verifier (cuset_core.evaluation.settings, where the
# seeds are called trials), each with its check, its default (KernelBench's) and its meaning
# written once. They are pydantic Field objects, typed as their values the way Field() itself is,
# so that type checkers see each field's default.
ARCH: str = Field("sm_90", pattern=r"^sm_\d+[a-z]?$", description="nvcc target of tier 1 (compile), e.g. sm_80")
TRIALS: int = Field(5, ge=1, le=20, description="correctness trials, one input seed each (KernelBench: 5)")
# An evaluation fixes its input seed (KernelBench's 1000) so that its runs compare; a plain
# verification leaves VerifySettings.input_seed unset and the judge draws one per run.
INPUT_SEED: int = Field(
    1000, ge=0, le=2**31 - 1, description="trial i draws the problem's inputs under seed input_seed + i"
)
TOLERANCE_PROFILE: ToleranceProfile = Field(
    "kernelbench",
    description="atol = rtol by output dtype: kernelbench (fp32 1e-4, fp16/bf16 1e-2) or v0 (1e-2 for every dtype)",
)
ATOL: float | None = Field(
    None, ge=0, allow_inf_nan=False, description="absolute tolerance for every dtype; null: the profile's"
)
RTOL: float | None = Field(
    None, ge=0, allow_inf_nan=False, description="relative tolerance for every dtype; null: the profile's"
)
POLICY: Policy = Field(
    "kernels",
    description="tier 2: the data-flow policy a pass must keep (DESIGN.md §4, cuset_core/verify/policy.py): "
    "kernels (the default): during forward only the candidate's kernels compute, and once the trials begin "
    "no device data reaches the host; mixed (KernelBench's rule): torch may compute on the device too (listed "
    "on the pass) and the kernels-did-the-work checks decide. Without the device boundary nothing polices "
    "the host, so mixed decides there",
)
COMPILE_BASELINE: bool = Field(
    False, description="tier 3 (GPU): also time the reference under torch.compile (inductor, default mode)"
)


class SandboxLimits(BaseModel):
    """Resource limits for one sandboxed candidate process."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    wall_s: float = Field(120.0, gt=0, description="wall-clock limit, seconds")
    cpu_s: int = Field(120, gt=0, description="CPU-time limit, seconds")
    memory_mb: int = Field(
        4096,
        gt=0,
        description="memory of all its processes together (a memory cgroup, where the verifier can make one: "
        "root), its tmpfs work folder included, MiB; also each process's address space unless address_space_mb",
    )
    address_space_mb: int | None = Field(
        None, gt=0, description="per-process address-space limit (RLIMIT_AS), MiB; None: memory_mb"
    )
    max_processes: int = Field(64, gt=0, description="processes/threads the sandbox may hold")
    file_size_mb: int = Field(256, gt=0, description="largest file it may write, MiB")
    workdir_mb: int = Field(
        256, gt=0, description="all it may write to its work folder together, MiB (a tmpfs of this size)"
    )
    gpu_memory_mb: int = Field(
        16384,
        gt=0,
        description="tier 3: device memory the candidate's process may allocate, MiB (torch's allocator is "
        "capped to it; tier 0 rejects allocating device memory any other way)",
    )
    hidden: tuple[str, ...] = Field(
        (),
        exclude=True,  # where a service keeps its files changes no verdict, so no cache key
        description="absolute paths covered inside the sandbox wherever they lie in a folder it mounts "
        "(a service's data dir, artifact root and database files): a folder shows up empty and unreadable, "
        "a file as the null device",
    )


class VerifySettings(BaseModel):
    """How far and how strictly to verify; every field changes the cache key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tier: Tier = Tier.CPU
    arch: str = ARCH
    strict_headers: bool = Field(False, description="tier 1 against the real torch headers")
    std_on_demand: bool = Field(
        True,
        description="tier 1 on the light stand-in: compile each unit first with only the standard headers its "
        "code names (parsing the others is most of a unit's time), then, if that fails, with all of them; "
        "False: all of them at once",
    )
    seeds: int = TRIALS
    input_seed: int | None = Field(
        None,
        ge=0,
        le=2**31 - 1,
        description="trial i draws the problem's inputs under seed input_seed + i; None (the default): the "
        "judge draws a fresh seed for every verification, so no table of answers for known inputs passes; "
        "a value reproduces a run",
    )
    tolerance_profile: ToleranceProfile = TOLERANCE_PROFILE
    atol: float | None = ATOL
    rtol: float | None = RTOL
    reduce_sizes: bool = Field(True, description="tier 2: shrink module-level size constants")
    torch_bridge: bool = Field(
        True,
        description="tier 2: compile extensions against the light stand-in of torch's C++ API first (torch "
        "runs through Python; about a second per build), falling back to ATen's headers for what it lacks; "
        "False: ATen's headers only (several seconds per build)",
    )
    device_boundary: bool = Field(
        True,
        description="tier 2: the candidate's host code in one process, its device memory and kernels in "
        "another (cpu/device/): host code that reads device memory faults, the outputs and the kernels-off "
        "runs are taken from the device process, and extensions build on the torch bridge only (an "
        "extension that needs ATen's headers is unsupported); False: one process, as before (the "
        "attacks that docs/verification.md lists under it pass there)",
    )
    policy: Policy = POLICY
    max_elements: int = Field(1 << 18, gt=0, description="tier 2: target tensor size after shrink")
    second_size: bool = Field(
        True,
        description="tier 2: the candidate also runs, in the same process, at a second, smaller reduction "
        "(half the element budget), and passes only at both, since the reduced sizes follow from the "
        "problem's text and a kernel could special-case them; the sides get half as much time again "
        "for it; False: one size only",
    )
    overlap_tiers: bool = Field(
        True,
        exclude=True,  # when tier 2 runs changes no verdict, so no cache key
        description="tier 2 runs while tier 1 compiles the candidate (it builds the candidate itself, and "
        "its reference depends on the problem alone; cancelled when tier 1 rejects the candidate); "
        "False: one after the other",
    )
    timing_trials: int = Field(100, ge=1, description="tier 3: timed calls after warmup")
    compile_baseline: bool = COMPILE_BASELINE
    limits: SandboxLimits = SandboxLimits()

    @model_validator(mode="after")
    def _boundary_needs_the_bridge(self) -> VerifySettings:
        if self.device_boundary and not self.torch_bridge:
            raise ValueError(
                "device_boundary needs torch_bridge: behind the device boundary extensions build on the "
                "torch bridge only (set device_boundary false to build on ATen's headers alone)"
            )
        return self

    def tolerance(self, dtype: str) -> tuple[float, float]:
        """(atol, rtol) for an output of ``dtype`` (torch's name without the prefix, e.g. "float16"):
        the profile's value for that dtype, where ``atol``/``rtol`` do not override it."""
        wide, half = PROFILE_TOLERANCE[self.tolerance_profile]
        default = half if dtype in HALF_DTYPES else wide
        return (default if self.atol is None else self.atol, default if self.rtol is None else self.rtol)


class SandboxSettings(BaseSettings):
    """How the operator runs the sandbox (``CUSET_SANDBOX_*`` environment variables); not part of
    any cache key, because a verdict never depends on them: without isolation tiers 1-3 refuse."""

    model_config = SettingsConfigDict(env_prefix="CUSET_SANDBOX_", extra="ignore")

    allow_unisolated: bool = Field(
        False,
        description="run candidates without isolation where it cannot be set up; for single-user local "
        "use only: a candidate can then read and write whatever the verifier's user can",
    )
    uid: int = Field(65534, gt=0, description="uid (and gid) candidates run as when the verifier is root")
