"""Which models the page may pick for a Studio action (filling a hole, proposing prompts).

The page names a choice, never a provider object or an import path: the server offers what
it was started with (``--fill-provider``, a scripted provider in tests) and the providers
registered in this environment, and refuses anything else, so keys and code stay on the
server's side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tensorsketch.canvas.studio.app import ApiError

__all__ = ["MAX_MODEL_CHARS", "ModelChoice", "installed_providers", "pick_model"]

#: The longest model name the page may send.
MAX_MODEL_CHARS = 200


@dataclass(frozen=True)
class ModelChoice:
    """One provider the page may pick: ``provider`` is its name on the wire, ``model`` the
    model it asks unless the page names another, ``configured`` whether the Studio was
    started with it (the others are registered providers, built on use)."""

    provider: str
    model: str | None = None
    configured: bool = False

    def view(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "configured": self.configured}


def installed_providers() -> list[str]:
    """The registered provider names (``fake`` is left out: it answers only from a script)."""
    from tensorsketch.registry import providers  # noqa: PLC0415 - listing imports no SDK

    return [name for name in providers.names() if name != "fake"]


def pick_model(choices: list[ModelChoice], body: dict[str, Any]) -> tuple[ModelChoice, str | None]:
    """The choice ``body["provider"]`` names (the first when left out) and the model to ask:
    ``body["model"]``, else the choice's own. Bad input is a 400 naming what is offered."""
    provider, model = body.get("provider"), body.get("model")
    names = [c.provider for c in choices]
    if provider is None:
        choice = choices[0]
    else:
        found = [c for c in choices if c.provider == provider] if isinstance(provider, str) else []
        if not found:
            raise ApiError(
                400,
                f"'provider' must be one of {', '.join(map(repr, names))} (what this Studio "
                f"offers), got {provider!r:.80}.",
                choices=names,
            )
        choice = found[0]
    if model is None or model == "":
        if choice.model is None and not choice.configured:
            raise ApiError(400, f"name the model {choice.provider} should ask: 'model'.")
        return choice, choice.model
    if (
        not isinstance(model, str)
        or len(model) > MAX_MODEL_CHARS
        or not model.isprintable()
        or model.strip() != model
    ):
        raise ApiError(
            400,
            f"'model' must be a model name (printable, no surrounding spaces, at most "
            f"{MAX_MODEL_CHARS} characters), got {model!r:.80}.",
        )
    return choice, model
