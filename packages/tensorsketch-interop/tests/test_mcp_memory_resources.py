"""A memory namespace served as MCP resources, read by the official Python SDK's ``Client``
in both protocol eras: the index, each item, key completion, and the errors."""

from __future__ import annotations

import json

import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError as SDKError

from tensorsketch.interop.mcp import build_mcp_server, memory_resources
from tensorsketch.memory import InMemoryStore

MODES = ["auto", "legacy"]


async def _store() -> InMemoryStore:
    store = InMemoryStore()
    await store.put(("users", "ana"), "lang", {"content": "answers in Portuguese"})
    await store.put(("users", "ana"), "tea/time", {"content": "green tea at 10"})
    await store.put(("users", "ana", "deeper"), "x", {"content": "not served"})
    await store.put(("users", "bob"), "lang", {"content": "answers in German"})
    return store


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_lists_reads_and_completes_a_namespace(mode: str) -> None:
    store = await _store()
    server = build_mcp_server([], resources=memory_resources(store, ("users", "ana")))
    async with Client(server, mode=mode) as client:
        (listed,) = (await client.list_resources()).resources
        assert listed.uri == "memory://users/ana"
        assert listed.mime_type == "application/json"
        (template,) = (await client.list_resource_templates()).resource_templates
        assert template.uri_template == "memory://users/ana/{key}"
        (index,) = (await client.read_resource("memory://users/ana")).contents
        assert isinstance(index, types.TextResourceContents)
        assert json.loads(index.text) == {
            "namespace": ["users", "ana"],
            "items": [
                {"key": "lang", "rev": 1, "uri": "memory://users/ana/lang"},
                {"key": "tea/time", "rev": 1, "uri": "memory://users/ana/tea%2Ftime"},
            ],
        }
        (item,) = (await client.read_resource("memory://users/ana/tea%2Ftime")).contents
        assert isinstance(item, types.TextResourceContents)
        got = json.loads(item.text)
        assert (got["key"], got["rev"], got["value"]) == (
            "tea/time",
            1,
            {"content": "green tea at 10"},
        )
        completed = await client.complete(
            types.ResourceTemplateReference(uri="memory://users/ana/{key}"),
            {"name": "key", "value": "te"},
        )
        assert completed.completion.values == ["tea%2Ftime"]


async def test_an_unknown_key_and_another_users_namespace_are_not_found() -> None:
    store = await _store()
    server = build_mcp_server([], resources=memory_resources(store, ["users", "ana"]))
    async with Client(server) as client:
        with pytest.raises(SDKError, match="no item 'nope'"):
            await client.read_resource("memory://users/ana/nope")
        with pytest.raises(SDKError, match="Unknown resource"):
            await client.read_resource("memory://users/bob/lang")


def test_bad_arguments_say_what_is_wrong() -> None:
    store = InMemoryStore()
    with pytest.raises(TypeError, match="needs a MemoryStore"):
        memory_resources({}, ("users",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="namespace"):
        memory_resources(store, ())
    with pytest.raises(ValueError, match="ASCII letters"):
        memory_resources(store, ("users",), scheme="mem ory")
