"""``LiteLLMProvider``: every model LiteLLM reaches, one name away.

LiteLLM speaks each vendor's own API (Bedrock, Vertex, Azure, Mistral, Cohere, Ollama, and
the vendors TensorSketch has providers for) behind one OpenAI-shaped call, so this provider
reuses the Chat Completions mapping of :class:`~tensorsketch.providers.openai.OpenAIProvider`
and sends it through ``litellm.acompletion`` instead of the ``openai`` client. Models are
named as LiteLLM names them: ``"anthropic/claude-sonnet-4-6"``, ``"bedrock/..."``,
``"ollama/llama3"``. Its errors (OpenAI-shaped exceptions with a status code) map to the same
core errors as the other providers'.
"""

from __future__ import annotations

from typing import Any

from tensorsketch.provider import Capabilities
from tensorsketch.providers._common import import_sdk
from tensorsketch.providers.openai import OpenAIProvider

__all__ = ["LiteLLMProvider"]

_litellm = import_sdk("litellm", "litellm")


class LiteLLMProvider(OpenAIProvider):
    """Any model LiteLLM supports, by its LiteLLM name.

    :param model: the LiteLLM model name, ``"<provider>/<model>"``.
    :param api_key: the vendor's key (by default LiteLLM reads the vendor's usual variable,
        such as ``ANTHROPIC_API_KEY``).
    :param base_url: another endpoint for that vendor (LiteLLM's ``api_base``).
    :param max_retries: retries LiteLLM itself makes (``num_retries``); 0 when middleware or
        a fallback chain retries.
    :param timeout: seconds per request.
    :param settings: further ``litellm.acompletion`` arguments sent with every call
        (``api_version``, ``aws_region_name``, ...).
    """

    _NAME = "LiteLLMProvider"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 0,
        timeout: float = 600.0,
        **settings: Any,
    ) -> None:
        self._check_model(model)
        self.model = model
        self.provider_name = "litellm"
        self.max_tokens_field = "max_tokens"  # LiteLLM maps it to each vendor's own field
        self._client = None
        call: dict[str, Any] = {"num_retries": max_retries, "timeout": timeout, **settings}
        if api_key is not None:
            call["api_key"] = api_key
        if base_url is not None:
            call["api_base"] = base_url
        self._settings = call

    @property
    def capabilities(self) -> Capabilities:
        """What the model behind the name supports, as LiteLLM's model map says."""
        return Capabilities(
            tools=_supports("supports_function_calling", self.model, default=True),
            strict_json=_supports("supports_response_schema", self.model, default=False),
            streaming=True,
            vision=_supports("supports_vision", self.model, default=False),
        )

    @property
    def client(self) -> Any:
        """The ``litellm`` module itself (LiteLLM has no client object)."""
        return _litellm

    async def aclose(self) -> None:
        """Nothing to close: LiteLLM keeps its own connection pools."""

    def _create(self, **request: Any) -> Any:
        return _litellm.acompletion(**request, **self._settings)

    def _route(self, request: dict[str, Any], options: dict[str, Any]) -> None:
        # LiteLLM takes every option as a keyword and passes on what the vendor knows.
        request.update(options)


def _supports(check: str, model: str, *, default: bool) -> bool:
    """LiteLLM's answer for ``model``; ``default`` for a model its map does not know (it
    would answer ``False`` for those, and a local model served under any name may well call
    tools)."""
    try:
        _litellm.get_model_info(model=model)
    except Exception:
        return default
    try:
        return bool(getattr(_litellm, check)(model=model))
    except Exception:
        return default
