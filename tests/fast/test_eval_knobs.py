"""The evaluation knobs are declared once, in the core's ``EvalKnobs``: ``POST /v1/evals``'s schema
and ``cuset eval``'s help show the core's defaults and bounds, and a bad value is refused with the
core's words on every road (the core, the API on the embedded database, the command line)."""

from __future__ import annotations

import json

import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from cuset_core.cli import app as cli_app
from cuset_core.cli.evaluate import knob_default, knob_help
from cuset_core.evaluation.config import EvalConfig, EvalKnobs
from tests.sqlite_service import enqueued

EVAL = {"model": "tiny", "samples": 0, "max_tokens": 32, "tier": "static", "problems": "demo:held-out"}
WIRE = {"max_new_tokens": "max_tokens"}  # the request's name of a knob, where it differs
BOUNDS = {
    "ge": "minimum",
    "gt": "exclusiveMinimum",
    "le": "maximum",
    "lt": "exclusiveMaximum",
    "max_length": "maxLength",
}


def core_bounds(name: str) -> dict[str, object]:
    """The knob's bounds as the core declares them, under their JSON-schema names."""
    return {
        BOUNDS[bound]: getattr(rule, bound)
        for rule in EvalKnobs.model_fields[name].metadata
        for bound in BOUNDS
        if hasattr(rule, bound)
    }


def schema_property(schema: dict, prop: dict) -> dict:
    """``prop`` with a nullable type's number branch merged in (``anyOf`` of the type and null)."""
    branches = [branch for branch in prop.get("anyOf", []) if branch.get("type") != "null"]
    return {**prop, **(branches[0] if len(branches) == 1 else {})}


def eval_options() -> dict[str, typer.core.TyperOption]:
    """``cuset eval``'s options by the knob each sets (its parameter's name)."""
    command = typer.main.get_command(cli_app).commands["eval"]  # type: ignore[attr-defined]
    return {param.name: param for param in command.params}


def test_every_knob_of_the_api_schema_has_the_cores_default_bounds_and_meaning(fast_client):
    schema = fast_client.get("/openapi.json").json()
    properties = schema["components"]["schemas"]["EvalCreate"]["properties"]
    for name, field in EvalKnobs.model_fields.items():
        prop = schema_property(schema, properties[WIRE.get(name, name)])
        default = field.default.value if hasattr(field.default, "value") else field.default
        assert prop.get("default") == default, name
        assert prop["description"] == field.description, name
        assert {key: prop[key] for key in core_bounds(name)} == core_bounds(name), name


def test_every_knob_of_cuset_eval_shows_the_cores_default_bounds_and_meaning():
    options = eval_options()
    for name in EvalKnobs.model_fields:
        option, field = options[name], EvalConfig.model_fields[name]
        assert option.default is None, name  # unset: --config, the adapter's card, then the core's default
        assert option.help is not None and field.description is not None
        assert option.help.lower().startswith(field.description.lower()), name
        for value in core_bounds(name).values():
            assert f" {value}" in option.help.split("Bounds:")[-1], name
        assert option.show_default == knob_default(name), name
    assert options["temperature"].show_default == "0.8" and "Bounds: >= 0.0, <= 2.0." in options["temperature"].help
    assert options["tier"].show_default == "compile" and knob_help("samples").endswith("Bounds: >= 0, <= 1000.")


# A bad value of each kind: a bound, a type, a choice, a list item, and the core's own checks of
# what can be drawn (the field they name, then the core's words).
BAD = [
    ({"temperature": 2.5}, ["--temperature", "2.5"], "temperature", "less than or equal to 2"),
    ({"samples": 1001}, ["--samples", "1001"], "samples", "less than or equal to 1000"),
    ({"trials": 0}, ["--trials", "0"], "trials", "greater than or equal to 1"),
    ({"top_p": 0}, ["--top-p", "0"], "top_p", "greater than 0"),
    ({"tolerance_profile": "loose"}, ["--tolerance-profile", "loose"], "tolerance_profile", "'kernelbench' or 'v0'"),
    ({"arch": "90"}, ["--arch", "90"], "arch", "should match pattern"),
    ({"greedy": False}, ["--no-greedy"], "samples", "nothing to generate: turn greedy on or ask for samples >= 1"),
    ({"samples": 2, "k": [1, 4]}, ["--samples", "2", "--k", "1,4"], "k", "k=4: pass@k needs 1 <= k <= samples (2"),
]


@pytest.mark.parametrize(("knobs", "flags", "field", "reason"), BAD)
def test_a_bad_knob_is_refused_with_the_cores_words_on_every_road(
    fast_client, fast_settings, tmp_path, knobs, flags, field, reason
):
    with pytest.raises(ValidationError) as core:
        EvalConfig(model="tiny", problems="demo:held-out", **knobs)
    assert reason in str(core.value)

    response = fast_client.post("/v1/evals", json=EVAL | knobs)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field and reason in error["message"]
    assert enqueued(fast_settings) == []

    outcome = CliRunner().invoke(
        cli_app, ["eval", "--model", "smollm2-135m", "--problems", "demo:held-out", "--out", str(tmp_path), *flags]
    )
    assert outcome.exit_code == 2 and outcome.output.startswith("error: ")
    assert reason in outcome.output


def test_cuset_eval_reads_a_config_file_and_its_options_override_it(tmp_path):
    config = tmp_path / "eval.json"
    config.write_text(json.dumps({"model": "smollm2-135m", "problems": "demo:held-out", "samples": 2, "k": [4]}))
    outcome = CliRunner().invoke(cli_app, ["eval", "--config", str(config), "--out", str(tmp_path)])
    assert outcome.exit_code == 2 and "k=4: pass@k needs 1 <= k <= samples (2" in outcome.output  # read from the file
    bad = CliRunner().invoke(cli_app, ["eval", "--config", str(config), "--samples", "5000", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and bad.output.startswith("error: samples: Input should be less than or equal to 1000")
    config.write_text(json.dumps({"problems": "demo", "colour": "blue"}))
    unknown = CliRunner().invoke(cli_app, ["eval", "--config", str(config), "--out", str(tmp_path)])
    assert unknown.exit_code == 2 and unknown.output.startswith("error: colour: Extra inputs are not permitted")
