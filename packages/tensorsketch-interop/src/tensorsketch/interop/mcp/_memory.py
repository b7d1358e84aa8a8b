"""A memory namespace as MCP resources: an index of its items and a template per item, so an
MCP client (a desktop assistant, an IDE) can read what an app's agents remember."""

from __future__ import annotations

import json
from collections.abc import Sequence
from urllib.parse import quote, unquote

from tensorsketch.interop.mcp._served import MCPResource, resource
from tensorsketch.memory import MemoryStore
from tensorsketch.memory.item import check_namespace

__all__ = ["memory_resources"]

#: The most items the index lists (and key completions consider).
INDEX_LIMIT = 1000


def memory_resources(
    store: MemoryStore, namespace: Sequence[str], *, scheme: str = "memory"
) -> list[MCPResource]:
    """Serve one namespace of ``store``, read-only, as two resources for
    :func:`build_mcp_server`'s ``resources=``:

    - ``memory://users/ana`` — the index: the namespace's items (key, revision, URI) as JSON;
    - ``memory://users/ana/{key}`` — one item's value as JSON, with completion of ``key``.

    Labels and keys are percent-encoded in the URIs. Only items directly in the namespace are
    served (not those of namespaces below it): pass each namespace you mean to expose.
    """
    if not isinstance(store, MemoryStore):
        msg = f"memory_resources(store, ...) needs a MemoryStore, got {type(store).__name__}."
        raise TypeError(msg)
    labels = check_namespace(namespace, what="memory_resources(namespace=...)")
    if not scheme.isascii() or not scheme.isalpha():
        msg = f"memory_resources(scheme=...) must be ASCII letters, got {scheme!r}."
        raise ValueError(msg)
    base = f"{scheme}://" + "/".join(quote(label, safe="") for label in labels)

    async def keys() -> list[str]:
        page = await store.list(labels, limit=INDEX_LIMIT)
        return [item.key for item in page.items if item.namespace == labels]

    async def index() -> str:
        page = await store.list(labels, limit=INDEX_LIMIT)
        listed = [
            {"key": item.key, "rev": item.rev, "uri": f"{base}/{quote(item.key, safe='')}"}
            for item in page.items
            if item.namespace == labels
        ]
        return json.dumps({"namespace": list(labels), "items": listed})

    async def item(key: str) -> str:
        found = await store.get(labels, unquote(key))
        if found is None:
            msg = f"no item {unquote(key)!r} in namespace {list(labels)}"
            raise LookupError(msg)
        return json.dumps(
            {
                "key": found.key,
                "rev": found.rev,
                "updated_at": found.updated_at,
                "value": found.value,
            }
        )

    async def complete_key(typed: str) -> list[str]:
        return [quote(k, safe="") for k in await keys() if k.startswith(unquote(typed))]

    name = "/".join(labels)
    return [
        resource(
            base,
            name=f"memory:{name}",
            description=f"The items of memory namespace {list(labels)}: key, revision, URI.",
            mime_type="application/json",
        )(index),
        resource(
            f"{base}/{{key}}",
            name=f"memory:{name}:item",
            description=f"One item of memory namespace {list(labels)}: its value, as JSON.",
            mime_type="application/json",
            complete={"key": complete_key},
        )(item),
    ]
