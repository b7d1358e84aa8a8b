"""The plugin is found through its entry point and its provider answers."""

from __future__ import annotations

from tensorsketch import create_provider
from tensorsketch.messages import user
from tensorsketch.registry import providers

from yourname_tensorsketch.provider import YournameProvider


def test_the_provider_is_registered_by_name() -> None:
    assert "yourname" in providers.names()
    provider = create_provider("yourname", model="m1")
    assert isinstance(provider, YournameProvider)
    assert provider.model == "m1"


async def test_the_provider_answers() -> None:
    completion = await YournameProvider().complete([user("hello")])
    assert completion.text == "hello"
