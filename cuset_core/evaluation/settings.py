"""The verification knobs of an evaluation, in one place: the core's ``EvalConfig`` (``cuset eval``)
and the API's ``POST /v1/evals`` body both inherit ``VerificationSettings``, so a knob, its
default and its limits are written once and mean the same on the command line and on the wire."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from cuset_core.verify.result import Tier
from cuset_core.verify.settings import Arch, InputSeed, Tolerance, ToleranceProfile, Trials, VerifySettings


class VerificationSettings(BaseModel):
    """How far and how strictly every sample of an evaluation is verified (KernelBench's defaults)."""

    model_config = ConfigDict(extra="forbid")

    tier: Tier = Field(Tier.COMPILE, description="verify every sample up to this tier")
    trials: Trials = 5
    input_seed: InputSeed = 1000
    tolerance_profile: ToleranceProfile = Field(
        "kernelbench", description="kernelbench: atol = rtol = 1e-4 for fp32 outputs, 1e-2 for fp16/bf16; v0: 1e-2"
    )
    atol: Tolerance = Field(None, description="absolute tolerance for every dtype; null: the profile's")
    rtol: Tolerance = Field(None, description="relative tolerance for every dtype; null: the profile's")
    arch: Arch = "sm_90"
    compile_baseline: bool = Field(False, description="GPU tier: also time torch.compile of the reference")

    def verify_settings(self) -> VerifySettings:
        """The verifier's settings for these knobs."""
        return VerifySettings(
            tier=self.tier,
            arch=self.arch,
            seeds=self.trials,
            input_seed=self.input_seed,
            tolerance_profile=self.tolerance_profile,
            atol=self.atol,
            rtol=self.rtol,
            compile_baseline=self.compile_baseline,
        )
