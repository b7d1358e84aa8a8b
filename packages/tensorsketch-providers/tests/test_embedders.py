"""The SDK embedders against a local server playing each vendor's embeddings wire protocol:
the official ``openai`` and ``google-genai`` clients send their real requests to 127.0.0.1."""

from __future__ import annotations

from typing import Any

import pytest
from wire_server import Reply  # type: ignore[import-not-found]

from tensorsketch.memory import InMemoryStore, PutRequest
from tensorsketch.providers.google_embeddings import GoogleEmbedder
from tensorsketch.providers.openai_embeddings import OpenAIEmbedder


def _openai_reply(vectors: list[list[float]], *, shuffled: bool = False) -> Any:
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    if shuffled:
        data.reverse()
    return {
        "object": "list",
        "data": data,
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }


async def test_openai_embedder_batches_and_keeps_order(server: Any) -> None:
    server.queue(
        Reply(body=_openai_reply([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], shuffled=True)),
        Reply(body=_openai_reply([[0.0, 0.0, 1.0]])),
    )
    embedder = OpenAIEmbedder(dimensions=3, base_url=server.url, batch_size=2, max_retries=0)
    vectors = await embedder.embed(["tea", "coffee", "dark mode"])
    assert vectors == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    first, second = server.requests
    assert first.path.endswith("/embeddings")
    assert first.body == {
        "model": "text-embedding-3-small",
        "input": ["tea", "coffee"],
        "encoding_format": "float",
        "dimensions": 3,
    }
    assert second.body["input"] == ["dark mode"]
    assert embedder.name == "openai:text-embedding-3-small:3"


async def test_openai_embedder_at_native_size_sends_no_dimensions(server: Any) -> None:
    server.queue(Reply(body=_openai_reply([[0.5] * 1536])))
    embedder = OpenAIEmbedder(base_url=server.url, max_retries=0)
    assert len((await embedder.embed(["x"]))[0]) == 1536
    assert "dimensions" not in server.last.body


async def test_openai_embedder_refuses_a_vector_of_the_wrong_size(server: Any) -> None:
    server.queue(Reply(body=_openai_reply([[1.0, 0.0]])))
    embedder = OpenAIEmbedder(dimensions=3, base_url=server.url, max_retries=0)
    with pytest.raises(ValueError, match="2 numbers where 3 were expected"):
        await embedder.embed(["x"])


def test_embedders_need_a_size_for_an_unknown_model() -> None:
    with pytest.raises(ValueError, match="dimensions="):
        OpenAIEmbedder("my-model", base_url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="dimensions="):
        GoogleEmbedder("my-model", base_url="http://127.0.0.1:9")


async def test_google_embedder_over_the_gemini_wire(server: Any) -> None:
    server.queue(Reply(body={"embeddings": [{"values": [1.0, 0.0]}, {"values": [0.0, 1.0]}]}))
    embedder = GoogleEmbedder(dimensions=2, api_key="k", base_url=server.url)
    assert await embedder.embed(["tea", "coffee"]) == [[1.0, 0.0], [0.0, 1.0]]
    sent = server.last
    assert sent.path.endswith("/models/gemini-embedding-001:batchEmbedContents")
    requests = sent.body["requests"]
    assert [r["content"]["parts"][0]["text"] for r in requests] == ["tea", "coffee"]
    assert all(r["outputDimensionality"] == 2 for r in requests)
    assert embedder.name == "google:gemini-embedding-001:2"


async def test_a_store_searches_with_an_sdk_embedder(server: Any) -> None:
    server.queue(
        Reply(body=_openai_reply([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])),  # the two puts
        Reply(body=_openai_reply([[0.9, 0.1, 0.0]])),  # the query
    )
    store = InMemoryStore(embedder=OpenAIEmbedder(dimensions=3, base_url=server.url, max_retries=0))
    await store.put_many(
        [PutRequest(("n",), "tea", {"text": "tea"}), PutRequest(("n",), "ui", {"text": "dark"})]
    )
    hits = await store.search(("n",), "a hot drink")
    assert [h.key for h in hits] == ["tea", "ui"]
    assert server.requests[-1].body["input"] == ["a hot drink"]
