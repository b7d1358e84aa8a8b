"""``AgentCard``: what an A2A server tells the world about the agent it serves.

The card is written once, in the user's words (name, description, skills), and rendered per
request for both protocol versions: A2A 1.0's card at ``/.well-known/agent-card.json`` (it
lists one JSON-RPC interface per version this server answers) and the 0.3 card at
``/.well-known/agent.json``. The interface URL defaults to where the request came in, so a
card need not know the host it is deployed on.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AgentCard", "AgentSkill"]

#: Protocol versions this server answers, newest first (the card's supportedInterfaces).
PROTOCOL_VERSIONS = ("1.0", "0.3")
#: MIME types a TensorSketch agent reads and writes: text, and JSON as data parts.
_MODES = ("text/plain", "application/json")


class AgentSkill(BaseModel):
    """One thing the agent can do, as A2A clients show it to a person or an orchestrator."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    description: str = ""
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    input_modes: tuple[str, ...] = ()
    output_modes: tuple[str, ...] = ()


class AgentCard(BaseModel):
    """The agent's public description, served at the well-known card paths.

    :param name: the agent's name (required).
    :param description: what it does, for people and for other agents choosing it.
    :param url: the JSON-RPC endpoint to advertise; by default the URL the app is reached at
        (right for a direct or mounted app; set it behind a proxy that rewrites hosts).
    :param version: the agent's own version (not the protocol's).
    :param skills: what it can do; one skill named after the card when empty.
    :param streaming: advertise ``SendStreamingMessage`` / ``message/stream`` (on by default).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    url: str | None = None
    version: str = "1.0.0"
    skills: tuple[AgentSkill, ...] = ()
    streaming: bool = True
    default_input_modes: tuple[str, ...] = _MODES
    default_output_modes: tuple[str, ...] = _MODES
    documentation_url: str | None = None
    icon_url: str | None = None
    provider_organization: str | None = None
    provider_url: str | None = None

    def to_v1(self, url: str, *, push_notifications: bool = False) -> dict[str, Any]:
        """The A2A 1.0 card as JSON (camelCase), advertising ``url`` for each version
        (``push_notifications``: whether the app delivers them, which the app knows)."""
        skills = self.skills or (
            AgentSkill(
                id=self.name,
                name=self.name,
                description=self.description or f"Ask {self.name}.",
                tags=("chat",),
            ),
        )
        card: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "supportedInterfaces": [
                {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": version}
                for version in PROTOCOL_VERSIONS
            ],
            "version": self.version,
            "capabilities": {
                "streaming": self.streaming,
                "pushNotifications": push_notifications,
                "extendedAgentCard": False,
            },
            "defaultInputModes": list(self.default_input_modes),
            "defaultOutputModes": list(self.default_output_modes),
            "skills": [_skill(s) for s in skills],
        }
        if self.documentation_url:
            card["documentationUrl"] = self.documentation_url
        if self.icon_url:
            card["iconUrl"] = self.icon_url
        if self.provider_organization:
            card["provider"] = {
                "organization": self.provider_organization,
                "url": self.provider_url or "",
            }
        return card

    def to_v03(self, url: str, *, push_notifications: bool = False) -> dict[str, Any]:
        """The A2A 0.3 card as JSON: one ``url`` with ``protocolVersion`` and transport."""
        v1 = self.to_v1(url, push_notifications=push_notifications)
        card = {key: value for key, value in v1.items() if key not in ("supportedInterfaces",)}
        card["capabilities"] = {
            "streaming": self.streaming,
            "pushNotifications": push_notifications,
            "stateTransitionHistory": False,
        }
        card.update(url=url, preferredTransport="JSONRPC", protocolVersion="0.3.0")
        for skill in card["skills"]:
            skill.setdefault("tags", [])
        return card

    def to_compatible(self, url: str, *, push_notifications: bool = False) -> dict[str, Any]:
        """The 1.0 card plus the 0.3 top-level fields, so a 0.3 client reading the 1.0 path
        also finds an endpoint (what the a2a-sdk's own server serves there)."""
        card = self.to_v1(url, push_notifications=push_notifications)
        legacy = self.to_v03(url, push_notifications=push_notifications)
        for key in ("url", "preferredTransport", "protocolVersion"):
            card[key] = legacy[key]
        return card


def _skill(skill: AgentSkill) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": skill.id,
        "name": skill.name,
        "description": skill.description,
        "tags": list(skill.tags),
    }
    if skill.examples:
        out["examples"] = list(skill.examples)
    if skill.input_modes:
        out["inputModes"] = list(skill.input_modes)
    if skill.output_modes:
        out["outputModes"] = list(skill.output_modes)
    return out
