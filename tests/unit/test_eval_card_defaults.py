"""An eval of an adapter whose card recorded its evaluation settings (cuset_base.json,
"evaluation") takes each setting the user left unset from there: the shipped cuset-ew-135m is
measured as its card says (tier cpu, temperature 0.7, top-p 0.95, compact, 768 tokens)."""

from __future__ import annotations

import json

from cuset_core.evaluation.card import recorded_eval_settings
from cuset_core.evaluation.config import EvalConfig
from cuset_core.verify.result import Tier

SHIPPED = "cuset-ew-135m"


def test_the_shipped_adapter_records_what_its_card_says():
    assert recorded_eval_settings(SHIPPED) == {
        "tier": "cpu",
        "temperature": 0.7,
        "top_p": 0.95,
        "prompt_style": "compact",
        "max_new_tokens": 768,
    }


def test_an_eval_of_the_shipped_adapter_defaults_to_its_card():
    config = EvalConfig(model=SHIPPED, problems="demo", samples=4)
    assert (config.tier, config.temperature, config.top_p, config.prompt_style, config.max_new_tokens) == (
        Tier.CPU,
        0.7,
        0.95,
        "compact",
        768,
    )
    # A recorded config read back is what ran, not re-defaulted.
    assert EvalConfig.model_validate(config.model_dump(mode="json")) == config


def test_what_the_user_sets_wins_over_the_card():
    config = EvalConfig(
        model=SHIPPED, problems="demo", tier="compile", temperature=0.2, top_p=0.5, prompt_style="kernelbench"
    )
    assert (config.tier, config.temperature, config.top_p, config.prompt_style) == (
        Tier.COMPILE,
        0.2,
        0.5,
        "kernelbench",
    )
    assert config.max_new_tokens == 768  # the one left unset still comes from the card


def test_a_base_model_or_an_adapter_without_a_record_keeps_the_defaults(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "cuset_base.json").write_text(json.dumps({"base_model": "smollm2-135m", "prompt_style": "compact"}))
    for model in ("smollm2-135m", str(adapter)):
        config = EvalConfig(model=model, problems="demo")
        assert (config.tier, config.temperature, config.top_p, config.max_new_tokens) == (Tier.COMPILE, 0.8, 0.95, 1024)
    assert EvalConfig(model=str(adapter), problems="demo").prompt_style == "compact"


def test_a_tuned_adapter_folder_with_a_record_is_measured_under_it(tmp_path):
    (tmp_path / "cuset_base.json").write_text(
        json.dumps({"base_model": "smollm2-135m", "evaluation": {"tier": "cpu", "temperature": 0.6, "bogus": 1}})
    )
    assert recorded_eval_settings(tmp_path) == {"tier": "cpu", "temperature": 0.6}
    config = EvalConfig(model=str(tmp_path), problems="demo")
    assert (config.tier, config.temperature) == (Tier.CPU, 0.6)
