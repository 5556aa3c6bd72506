"""Every JSON document the service stores has a type: each JSON column names its pydantic type
(``TypedJSON``), and the API's schema (``/docs``) shows those types rather than bare objects."""

from __future__ import annotations

from sqlalchemy import JSON

from api.main import create_app
from db.models import Base


def test_every_json_column_names_its_type():
    untyped = [
        f"{table.name}.{column.name}"
        for table in Base.metadata.sorted_tables
        for column in table.columns
        if isinstance(column.type, JSON)  # TypedJSON wraps JSON; a bare JSON column is a dict of anything
    ]

    assert untyped == []


def test_the_api_schema_shows_a_verdict_and_an_evals_knobs_and_aggregate(sqlite_settings):
    schemas = create_app(sqlite_settings).openapi()["components"]["schemas"]

    verification = schemas["GeneratedSample"]["properties"]["verification"]
    assert {"$ref": "#/components/schemas/VerifyResult"} in verification["anyOf"]
    assert {"verdict", "tier", "reason"} <= set(schemas["VerifyResult"]["properties"])
    evaluation = schemas["EvalObject"]["properties"]
    assert evaluation["config"]["$ref"] == "#/components/schemas/EvalKnobs"
    assert {"$ref": "#/components/schemas/Aggregate"} in evaluation["aggregate"]["anyOf"]


def test_the_api_schema_shows_a_jobs_hyperparameters_and_method(sqlite_settings):
    schemas = create_app(sqlite_settings).openapi()["components"]["schemas"]

    job = schemas["JobObject"]["properties"]
    assert job["hyperparameters"]["$ref"] == "#/components/schemas/HyperparametersView"
    assert {"n_epochs", "batch_size", "learning_rate_multiplier", "lora", "save_steps", "max_seq_len"} <= set(
        schemas["HyperparametersView"]["properties"]
    )
    assert job["method"]["$ref"] == "#/components/schemas/MethodView"
    assert {"type", "mask_ratio", "self_training"} <= set(schemas["MethodView"]["properties"])
