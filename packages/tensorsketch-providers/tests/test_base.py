"""The scaffold the three vendor providers share (``_base.SDKProvider``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tensorsketch.messages import user
from tensorsketch.provider import AuthenticationError, Capabilities, RateLimitError
from tensorsketch.providers._base import SDKProvider
from tensorsketch.providers.anthropic import AnthropicProvider
from tensorsketch.providers.google import GoogleProvider
from tensorsketch.providers.openai import OpenAIProvider

VENDORS = [AnthropicProvider, OpenAIProvider, GoogleProvider]


class _Closable:
    def __init__(self) -> None:
        self.closed = 0
        self.aio = self

    async def close(self) -> None:
        self.closed += 1

    async def aclose(self) -> None:
        self.closed += 1


@pytest.mark.parametrize("cls", VENDORS)
def test_every_vendor_stands_on_the_one_scaffold(cls: type[SDKProvider]) -> None:
    for name in ("client", "capabilities", "complete", "stream", "_reraise", "_events"):
        assert name not in vars(cls), f"{cls.__name__} redefines {name}"
    assert issubclass(cls, SDKProvider)


@pytest.mark.parametrize("cls", VENDORS)
def test_model_and_client_checks_name_the_public_class(cls: type[SDKProvider]) -> None:
    with pytest.raises(ValueError, match=rf"^`{cls.__name__}\(model=\.\.\.\)` needs a model id"):
        cls(model="", api_key="k")
    with pytest.raises(ValueError, match=rf"either `client=` or `api_key=`.* to `{cls.__name__}`"):
        cls(client=object(), api_key="k")


def test_client_conflict_messages_are_unchanged() -> None:
    with pytest.raises(ValueError) as anthropic:
        AnthropicProvider(client=object(), base_url="http://x")
    assert str(anthropic.value) == (
        "pass either `client=` or `api_key=`/`base_url=` to `AnthropicProvider`, not both: "
        "the client already carries its key and endpoint."
    )
    with pytest.raises(ValueError) as google:
        GoogleProvider(client=object(), http_options={})
    assert str(google.value) == (
        "pass either `client=` or `api_key=`/`base_url=`/`http_options=` to `GoogleProvider`, "
        "not both: the client already carries its settings."
    )


@pytest.mark.parametrize(
    ("cls", "strict"), [(AnthropicProvider, False), (OpenAIProvider, True), (GoogleProvider, True)]
)
async def test_client_capabilities_and_aclose(cls: type[SDKProvider], strict: bool) -> None:
    client = _Closable()
    provider = cls(client=client)
    assert provider.client is client
    assert provider.capabilities == Capabilities(
        tools=True, strict_json=strict, streaming=True, vision=True
    )
    await provider.aclose()
    assert client.closed == 1


class _RateLimited(Exception):
    status_code = 429


async def test_stream_maps_an_error_opening_the_stream_like_complete() -> None:
    class Failing:
        class messages:
            @staticmethod
            async def create(**_: Any) -> Any:
                raise _RateLimited("slow down")

    provider = AnthropicProvider(client=Failing())
    with pytest.raises(RateLimitError) as done:
        await provider.complete([user("hi")])
    assert isinstance(done.value.__cause__, _RateLimited)
    with pytest.raises(RateLimitError):
        async for _ in provider.stream([user("hi")]):
            pass


#: Every variable a vendor SDK takes a credential (or a place to find one) from.
_CREDENTIAL_VARIABLES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_CONFIG_DIR",
    "ANTHROPIC_IDENTITY_TOKEN",
    "ANTHROPIC_IDENTITY_TOKEN_FILE",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
)


@pytest.mark.parametrize(
    ("vendor", "variable"),
    [
        (AnthropicProvider, "ANTHROPIC_API_KEY"),
        (OpenAIProvider, "OPENAI_API_KEY"),
        (GoogleProvider, "GEMINI_API_KEY"),
    ],
)
def test_a_missing_key_is_refused_at_construction_naming_its_variable(
    vendor: Any, variable: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same moment and the same error for all three (Anthropic used to construct, then
    fail at the first call with the SDK's ``TypeError``)."""
    for name in _CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no credentials profile on this machine's disk
    with pytest.raises(AuthenticationError, match=f"`{variable}`.*`{vendor.__name__}"):
        vendor()
