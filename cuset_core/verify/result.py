"""The one result type of kernel verification: a verdict, the tier that decided it, and evidence.

Every tier returns (or contributes to) a ``VerifyResult``. It is a pydantic model so it
serialises to stable JSON (``result.model_dump(mode="json")``) for the CLI, caches and the
service.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field, computed_field


class Verdict(StrEnum):
    """Outcome of verifying one candidate against one problem (DESIGN.md §4)."""

    NO_CODE = "no_code"
    STATIC_REJECT = "static_reject"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    SHAPE_MISMATCH = "shape_mismatch"
    VALUE_MISMATCH = "value_mismatch"
    TIMEOUT = "timeout"
    UNSUPPORTED = "unsupported"  # tier 2 cannot model a feature; never counted as pass or fail
    # A fault of the verifier or the machine (a harness crash, a missing tool, a header that does
    # not build here, a broken reference): never cached, never counted as the model's failure.
    INTERNAL_ERROR = "internal_error"
    PASS = "pass"


class Tier(StrEnum):
    """Verification tiers, cheapest first; running a tier runs every cheaper one before it."""

    STATIC = "static"
    COMPILE = "compile"
    CPU = "cpu"
    GPU = "gpu"

    @property
    def rank(self) -> int:
        """0 for static .. 3 for gpu."""
        return list(Tier).index(self)


class Diagnostic(BaseModel):
    """One compiler or static-check message, with its line in the candidate file (1-based)."""

    severity: str = Field(description="error | warning | note")
    message: str
    line: int | None = Field(None, description="line in the candidate file, 1-based")
    column: int | None = None


class KernelResources(BaseModel):
    """ptxas resource usage of one kernel."""

    kernel: str = Field(description="demangled kernel name when available")
    registers: int = 0
    shared_bytes: int = 0
    constant_bytes: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0


class SizesRun(BaseModel):
    """The problem sizes one set of tier-2 trials ran at (the reduced sizes, the second size, or the
    original sizes of a rerun)."""

    sizes: dict[str, int] = Field(
        default_factory=dict, description="the problem's module-level int constants as they ran, by name"
    )
    shrunk: dict[str, int] = Field(
        default_factory=dict, description="the constants that ran below their original value: name -> original value"
    )
    input_shapes: list[list[list[int]]] = Field(
        default_factory=list, description="per trial, the shape of each input ([] for a scalar or a non-tensor)"
    )

    @property
    def original(self) -> bool:
        """Whether these are the problem's original sizes (nothing shrunk)."""
        return not self.shrunk


class VerifyResult(BaseModel):
    """Everything a verification run found out, stable and JSON-serialisable."""

    verdict: Verdict
    tier: Tier = Field(description="the tier that decided the verdict")
    tiers_run: list[Tier] = Field(default_factory=list)
    tier_verdicts: dict[Tier, Verdict] = Field(
        default_factory=dict,
        description="what each tier that ran concluded, cheapest first; static and compile record pass "
        "when they let the candidate through (empty in results from before this field)",
    )
    reason: str = Field("", description="one line saying why, for humans")
    unsupported_feature: str | None = Field(None, description="named when verdict is unsupported")
    timings_s: dict[str, float] = Field(default_factory=dict, description="seconds per stage")
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    resources: list[KernelResources] = Field(default_factory=list)
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    launches: dict[str, int] = Field(default_factory=dict, description="kernel name -> launches")
    trials: int = Field(0, description="correctness trials (seeds) that ran")
    runtime_ms: float | None = Field(None, description="tier 3: candidate mean time per call")
    reference_ms: float | None = Field(None, description="tier 3: eager PyTorch mean time per call")
    speedup: float | None = Field(None, description="tier 3: reference_ms / runtime_ms")
    compile_ms: float | None = Field(None, description="tier 3: the reference under torch.compile, mean time per call")
    compile_speedup: float | None = Field(None, description="tier 3: compile_ms / runtime_ms")
    built_with: dict[str, str] = Field(
        default_factory=dict,
        description="tier 2: the headers each extension was compiled against: bridge (the light stand-in of "
        "torch's C++ API, torch run through Python), or ATen's light or full headers when it needs more",
    )
    policy: Literal["kernels", "mixed"] | None = Field(
        None,
        description="tier 2: the data-flow policy that decided (DESIGN.md §4): kernels (only the candidate's "
        "kernels computed, no device data reached the host) or mixed (torch compute on the device allowed and "
        "listed in torch_ops); None where no policy applies (tiers 0, 1 and 3)",
    )
    torch_ops: dict[str, int] = Field(
        default_factory=dict, description="tier 2: torch's compute operators during forward, by name, with counts"
    )
    mixed_pass: bool | None = Field(
        None,
        description="tier 2 under policy kernels, when the candidate broke it: whether it passes under policy "
        "mixed (every other check passed); None otherwise",
    )
    sizes_run: list[SizesRun] = Field(
        default_factory=list,
        description="tier 2: the sizes its trials ran at, in order (the reduced sizes, the second size when the "
        "first passed, the original sizes of a rerun); empty where tier 2 ran no trial",
    )
    log: str = Field("", description="excerpt of the log that explains a failure")
    cached: bool = False

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASS

    @computed_field  # type: ignore[prop-decorator]
    @property
    def original_sizes_run(self) -> bool | None:
        """Whether a trial ran at the problem's original sizes; None where tier 2 ran no trial."""
        return any(run.original for run in self.sizes_run) if self.sizes_run else None
