"""The openai:URL#NAME model spec (the endpoint itself is exercised in tests/integration)."""

from __future__ import annotations

import pytest

from cuset_core.generation.endpoint import Endpoint, is_endpoint_spec, parse_endpoint


def test_an_endpoint_spec_names_the_base_url_and_the_served_model():
    assert parse_endpoint("openai:http://127.0.0.1:8000/v1/#org/model-7b") == Endpoint(
        "http://127.0.0.1:8000/v1", "org/model-7b"
    )
    assert is_endpoint_spec("openai:https://x/v1#m") and not is_endpoint_spec("smollm2-135m")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("openai:http://127.0.0.1:8000/v1", "expected openai:URL#NAME"),
        ("openai:http://127.0.0.1:8000/v1#", "expected openai:URL#NAME"),
        ("openai:127.0.0.1:8000#m", "the URL must be http"),
        ("openai:file:///etc/passwd#m", "the URL must be http"),
    ],
)
def test_malformed_endpoint_specs_say_what_is_expected(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_endpoint(spec)
