"""``OpenAIEmbedder``: the memory stores' :class:`~tensorsketch.memory.Embedder` over the
official ``openai`` SDK's embeddings endpoint (OpenAI, or any server speaking its API)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from tensorsketch.memory.embedder import Embedder
from tensorsketch.provider import AuthenticationError
from tensorsketch.providers._common import import_sdk

__all__ = ["OpenAIEmbedder"]

_sdk = import_sdk("openai", "openai")

#: Native vector sizes of OpenAI's embedding models (``dimensions=`` shortens the v3 ones).
DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
_PLACEHOLDER_KEY = "not-needed"


class OpenAIEmbedder(Embedder):
    """Embeds through ``client.embeddings.create`` in batches of ``batch_size`` texts.

    :param model: the embedding model.
    :param dimensions: the vector length: sent to the API to shorten a v3 model's vectors;
        required for a model this class does not know.
    :param api_key: default ``OPENAI_API_KEY``; a local server at ``base_url`` needs none.
    :param base_url: another server speaking OpenAI's API.
    :param client: a ready ``openai.AsyncOpenAI`` to use instead of building one.
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        dimensions: int | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        client: Any = None,
        batch_size: int = 512,
        max_retries: int = 2,
        timeout: float = 60.0,
    ) -> None:
        native = DIMENSIONS.get(model)
        if dimensions is None and native is None:
            msg = (
                f"OpenAIEmbedder does not know the vector size of {model!r}; pass "
                "dimensions=<its length>."
            )
            raise ValueError(msg)
        if dimensions is not None and (not isinstance(dimensions, int) or dimensions < 1):
            msg = f"OpenAIEmbedder(dimensions=...) must be a positive int, got {dimensions!r}."
            raise ValueError(msg)
        if not isinstance(batch_size, int) or batch_size < 1:
            msg = f"OpenAIEmbedder(batch_size=...) must be a positive int, got {batch_size!r}."
            raise ValueError(msg)
        self.model = model
        self.dimension = dimensions if dimensions is not None else int(native or 0)
        self._send_dimensions = dimensions is not None and dimensions != native
        self.name = f"openai:{model}:{self.dimension}"
        self.batch_size = batch_size
        if client is not None:
            self._client = client
            return
        if api_key is None and not os.environ.get("OPENAI_API_KEY"):
            if base_url is None:
                msg = (
                    "no OpenAI API key: set the `OPENAI_API_KEY` environment variable or pass "
                    "`OpenAIEmbedder(api_key=...)` (a local server needs only `base_url=`)."
                )
                raise AuthenticationError(msg, provider="openai", model=model)
            api_key = _PLACEHOLDER_KEY
        self._client = _sdk.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
        )

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.model!r}, dimensions={self.dimension})"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            options: dict[str, Any] = {"encoding_format": "float"}
            if self._send_dimensions:
                options["dimensions"] = self.dimension
            reply = await self._client.embeddings.create(model=self.model, input=batch, **options)
            ordered = sorted(reply.data, key=lambda d: d.index)
            if len(ordered) != len(batch):
                msg = f"{self.model} returned {len(ordered)} embeddings for {len(batch)} texts."
                raise ValueError(msg)
            for item in ordered:
                vectors.append(
                    _checked([float(x) for x in item.embedding], self.dimension, self.model)
                )
        return vectors


def _checked(vector: list[float], dimension: int, model: str) -> list[float]:
    if len(vector) != dimension:
        msg = (
            f"{model} returned a vector of {len(vector)} numbers where {dimension} were "
            "expected; pass the model's size as dimensions=."
        )
        raise ValueError(msg)
    return vector
