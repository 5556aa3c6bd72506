"""/v1/generate renders a problem in the prompt style the model was tuned with unless asked otherwise."""

from __future__ import annotations

from api.routers.inference import _generate_request
from api.schemas.inference import GenerateRequest
from cuset_core.demo import demo_problems
from cuset_core.generation.prompts import prompt_for
from db.settings import Settings

PROBLEM = demo_problems()[0].problem_code


def _rendered(model_style, asked=None):
    body = GenerateRequest(model="m", problem=PROBLEM, **({"prompt_style": asked} if asked else {}))
    request = _generate_request(Settings(), body, model_style)
    return request.prompt_style, request.prompts[0][-1]["content"]


def test_an_adapter_s_recorded_style_is_the_default():
    assert _rendered("kernelbench") == ("kernelbench", prompt_for(PROBLEM, "kernelbench"))


def test_a_model_without_a_record_gets_compact_and_a_request_s_style_wins():
    assert _rendered(None) == ("compact", prompt_for(PROBLEM, "compact"))
    assert _rendered("kernelbench", asked="compact") == ("compact", prompt_for(PROBLEM, "compact"))
