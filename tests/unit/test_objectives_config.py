"""MethodConfig: defaults, validation errors that name the field, the mask warmup ramp."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cuset_core.objectives import MethodConfig


def test_defaults_are_design_defaults():
    config = MethodConfig()
    assert config.type == "cuset"
    assert config.confidence == "online"
    assert (config.mask_ratio, config.region_quantile, config.reweight_lambda) == (0.3, 0.2, 2.0)
    assert (config.w_min, config.w_max) == (0.5, 4.0)
    assert (config.focal_gamma, config.profit_threshold) == (2.0, 0.1)
    assert (config.region_extent, config.region_confidence, config.mask_rule) == (
        "unit",
        "geometric",
        "confident_plain",
    )
    assert (config.tau_lo_from, config.tau_lo_decay, config.normaliser_decay) == ("regions", 0.9, 0.9)
    assert config.region_threshold is None and not config.dataset_reweighting


def test_cuset_v1_has_every_v1_knob():
    config = MethodConfig(type="cuset_v1")
    assert (config.region_extent, config.region_confidence, config.tau_lo_from) == ("span", "mean", "tokens")
    assert (config.tau_lo_decay, config.normaliser_decay, config.reweight_scope) == (0.0, 0.0, "step")
    assert (config.reweight_lambda, config.w_min, config.w_max, config.mask_ratio) == (1.0, 0.5, 3.0, 0.3)
    assert config.uses_masking and config.uses_reweighting


def test_cuset_v1_knobs_set_in_the_config_win_and_survive_a_dump():
    config = MethodConfig(type="cuset_v1", reweight_lambda=2.0)
    assert (config.reweight_lambda, config.region_extent) == (2.0, "span")
    assert MethodConfig.model_validate(config.model_dump()) == config


def test_a_stored_v1_era_dump_still_loads():
    # What the API stored for a cuset job before v2: every field of the v1 MethodConfig.
    stored = {
        "type": "cuset",
        "confidence": "online",
        "mask_ratio": 0.3,
        "mask_warmup_steps": 0,
        "region_quantile": 0.2,
        "region_threshold": None,
        "reweight_lambda": 1.0,
        "w_min": 0.5,
        "w_max": 3.0,
        "focal_gamma": 2.0,
        "profit_threshold": 0.1,
    }
    config = MethodConfig.model_validate(stored)
    assert (config.type, config.reweight_lambda, config.w_max) == ("cuset", 1.0, 3.0)


def test_mask_rule_none_turns_masking_off():
    assert not MethodConfig(type="cuset", mask_rule="none").uses_masking
    assert MethodConfig(type="cuset", mask_rule="uncertain_plain").uses_masking


def test_contradictory_knobs_are_rejected_with_a_reason():
    with pytest.raises(ValidationError, match="mask_rule 'none' leaves cuset_mask nothing to do"):
        MethodConfig(type="cuset_mask", mask_rule="none")
    with pytest.raises(ValidationError, match="reweight_scope 'dataset' needs confidence 'reference'"):
        MethodConfig(reweight_scope="dataset")


def test_reference_confidence_reweights_over_the_dataset_unless_told_otherwise():
    assert MethodConfig(confidence="reference").dataset_reweighting
    assert not MethodConfig(confidence="reference", reweight_scope="step").dataset_reweighting
    assert not MethodConfig(type="cuset_v1", confidence="reference").dataset_reweighting
    assert not MethodConfig(type="cuset_mask", confidence="reference").dataset_reweighting


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
        ("region_extent", "file"),
        ("region_confidence", "harmonic"),
        ("mask_rule", "random"),
        ("tau_lo_from", "samples"),
        ("tau_lo_decay", 1.0),
        ("normaliser_decay", -0.1),
        ("reweight_scope", "epoch"),
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
