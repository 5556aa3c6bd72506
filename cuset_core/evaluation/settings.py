"""The verification knobs of an evaluation, in one place: the core's ``EvalConfig`` (``cuset eval``)
and the API's ``POST /v1/evals`` body both inherit ``VerificationSettings``, so a knob means the
same on the command line and on the wire. Each knob's check, default and meaning are the
verifier's own (``cuset_core.verify.settings``); only the tier's default differs here."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from cuset_core.evaluation.card import CARD
from cuset_core.verify.policy import Policy
from cuset_core.verify.result import Tier
from cuset_core.verify.settings import (
    ARCH,
    ATOL,
    COMPILE_BASELINE,
    INPUT_SEED,
    POLICY,
    RTOL,
    TOLERANCE_PROFILE,
    TRIALS,
    ToleranceProfile,
    VerifySettings,
)


class VerificationSettings(BaseModel):
    """How far and how strictly every sample of an evaluation is verified (KernelBench's defaults)."""

    model_config = ConfigDict(extra="forbid")

    tier: Tier = Field(Tier.COMPILE, description=f"verify every sample up to this tier; {CARD}")
    trials: int = TRIALS
    input_seed: int = INPUT_SEED
    tolerance_profile: ToleranceProfile = TOLERANCE_PROFILE
    atol: float | None = ATOL
    rtol: float | None = RTOL
    arch: str = ARCH
    compile_baseline: bool = COMPILE_BASELINE
    policy: Policy = POLICY

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
            policy=self.policy,
        )
