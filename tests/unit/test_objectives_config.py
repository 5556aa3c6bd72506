"""MethodConfig: defaults, validation errors that name the field, the mask warmup ramp."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cuset_core.objectives import MethodConfig


def test_defaults_are_design_defaults():
    config = MethodConfig()
    assert config.type == "cuset"
    assert config.confidence == "online"
    assert (config.mask_ratio, config.region_quantile, config.reweight_lambda) == (0.3, 0.2, 1.0)
    assert (config.w_min, config.w_max) == (0.5, 3.0)
    assert (config.focal_gamma, config.profit_threshold) == (2.0, 0.1)


@pytest.mark.parametrize(
    "field, value",
    [
        ("type", "grpo"),
        ("confidence", "oracle"),
        ("mask_ratio", 1.0),
        ("mask_ratio", -0.1),
        ("mask_warmup_steps", -1),
        ("region_quantile", 0.0),
        ("region_quantile", 1.0),
        ("region_threshold", 1.5),
        ("reweight_lambda", -1.0),
        ("w_min", 1.5),
        ("w_min", 0.0),
        ("w_max", 0.9),
        ("focal_gamma", -2.0),
        ("profit_threshold", 1.0),
    ],
)
def test_invalid_values_are_rejected_naming_the_field(field, value):
    with pytest.raises(ValidationError) as error:
        MethodConfig(**{field: value})
    assert [e["loc"] for e in error.value.errors()] == [(field,)]


def test_unknown_fields_are_rejected_by_name():
    with pytest.raises(ValidationError) as error:
        MethodConfig(mask_rate=0.2)
    assert error.value.errors()[0]["loc"] == ("mask_rate",)
    assert error.value.errors()[0]["type"] == "extra_forbidden"


@pytest.mark.parametrize(
    "method, masking, reweighting",
    [
        ("sft", False, False),
        ("dft", False, False),
        ("focal", False, False),
        ("profit", False, False),
        ("cuset", True, True),
        ("cuset_mask", True, False),
        ("cuset_reweight", False, True),
    ],
)
def test_which_methods_mask_and_reweight(method, masking, reweighting):
    config = MethodConfig(type=method)
    assert (config.uses_masking, config.uses_reweighting) == (masking, reweighting)
    assert config.needs_sensitivity == (masking or reweighting)


def test_mask_ratio_ramps_linearly_over_the_warmup_steps():
    config = MethodConfig(mask_ratio=0.4, mask_warmup_steps=10)
    assert [config.mask_ratio_at(step) for step in (0, 5, 10, 20)] == pytest.approx([0.0, 0.2, 0.4, 0.4])


def test_without_warmup_the_full_ratio_applies_from_step_0():
    assert MethodConfig(mask_ratio=0.3).mask_ratio_at(0) == 0.3
