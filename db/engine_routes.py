"""Where a model is decoded when an inference engine serves it (``Settings.inference_engines``):
the route a request stores and a worker or the eval runner follows. Which route a model takes is
service/engine_routing.py's."""

from __future__ import annotations

import os

from pydantic import BaseModel, Field

from cuset_core.generation.endpoint import OPENAI_PREFIX, Endpoint


class EngineRoute(BaseModel):
    """Where a model is decoded when an engine serves it: the engine's base URL and the name the
    model has there (the base model's, or a tuned adapter's fine-tuned model id)."""

    url: str
    model: str
    api_key_env: str | None = Field(None, description="environment variable holding the engine's key")
    supports_n: bool = Field(True, description="whether the engine returns n choices per request")

    def endpoint(self) -> Endpoint:
        return Endpoint(base_url=self.url, model=self.model, supports_n=self.supports_n)

    def spec(self) -> str:
        """As a cuset_core model spec (``openai:URL#NAME``), which ``cuset eval`` decodes remotely."""
        return f"{OPENAI_PREFIX}{self.url}#{self.model}"

    def api_key(self) -> str | None:
        """The engine's key, read from ``api_key_env`` in this process's environment (never stored)."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    def headers(self) -> dict[str, str]:
        key = self.api_key()
        return {"Authorization": f"Bearer {key}"} if key else {}
