"""Register the built-in providers with TensorSketch's registry, by name and lazily.

The targets are ``"module:Attribute"`` strings, so listing provider names imports no vendor
SDK; ``create_provider("openai", ...)`` is the first moment ``openai`` is imported.
"""

from __future__ import annotations

from tensorsketch.hookspecs import hookimpl

__all__ = ["PROVIDERS", "tensorsketch_providers"]

#: Provider name -> where its class lives.
PROVIDERS: dict[str, str] = {
    "anthropic": "tensorsketch.providers.anthropic:AnthropicProvider",
    "openai": "tensorsketch.providers.openai:OpenAIProvider",
    "openai-responses": "tensorsketch.providers.openai_responses:OpenAIResponsesProvider",
    "google": "tensorsketch.providers.google:GoogleProvider",
    "litellm": "tensorsketch.providers.litellm:LiteLLMProvider",
}


@hookimpl
def tensorsketch_providers() -> dict[str, str]:
    """The built-in vendor providers."""
    return dict(PROVIDERS)
