"""``GoogleEmbedder``: the memory stores' :class:`~tensorsketch.memory.Embedder` over the
official ``google-genai`` SDK's ``embed_content`` (the Gemini API, or Vertex AI)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from tensorsketch.memory.embedder import Embedder
from tensorsketch.provider import AuthenticationError
from tensorsketch.providers._common import import_sdk

__all__ = ["GoogleEmbedder"]

_genai = import_sdk("google.genai", "google")
_types = import_sdk("google.genai.types", "google")

#: Native vector sizes of Google's embedding models (``dimensions=`` shortens them).
DIMENSIONS = {"gemini-embedding-001": 3072, "text-embedding-004": 768}
_KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
_PLACEHOLDER_KEY = "not-needed"


class GoogleEmbedder(Embedder):
    """Embeds through ``client.aio.models.embed_content`` in batches of ``batch_size``.

    :param model: the embedding model.
    :param dimensions: the vector length (sent as ``output_dimensionality``); required for a
        model this class does not know.
    :param task_type: Gemini's ``task_type`` hint (e.g. ``"RETRIEVAL_DOCUMENT"``), if any.
    :param api_key: default ``GEMINI_API_KEY`` / ``GOOGLE_API_KEY``.
    :param base_url: another endpoint speaking the Gemini REST API.
    :param client: a ready ``google.genai.Client`` to use instead of building one.
    """

    def __init__(
        self,
        model: str = "gemini-embedding-001",
        *,
        dimensions: int | None = None,
        task_type: str | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        client: Any = None,
        batch_size: int = 100,
    ) -> None:
        native = DIMENSIONS.get(model)
        if dimensions is None and native is None:
            msg = (
                f"GoogleEmbedder does not know the vector size of {model!r}; pass "
                "dimensions=<its length>."
            )
            raise ValueError(msg)
        if dimensions is not None and (not isinstance(dimensions, int) or dimensions < 1):
            msg = f"GoogleEmbedder(dimensions=...) must be a positive int, got {dimensions!r}."
            raise ValueError(msg)
        if not isinstance(batch_size, int) or batch_size < 1:
            msg = f"GoogleEmbedder(batch_size=...) must be a positive int, got {batch_size!r}."
            raise ValueError(msg)
        self.model = model
        self.dimension = dimensions if dimensions is not None else int(native or 0)
        self._send_dimensions = dimensions is not None and dimensions != native
        self.task_type = task_type
        self.name = f"google:{model}:{self.dimension}"
        self.batch_size = batch_size
        if client is not None:
            self._client = client
            return
        if api_key is None and not any(os.environ.get(k) for k in _KEY_VARIABLES):
            if base_url is None:
                msg = (
                    "no Gemini API key: set the `GEMINI_API_KEY` environment variable or pass "
                    "`GoogleEmbedder(api_key=...)`."
                )
                raise AuthenticationError(msg, provider="gcp.gemini", model=model)
            api_key = _PLACEHOLDER_KEY
        options: dict[str, Any] = {"retry_options": {"attempts": 1}}
        if base_url is not None:
            options["base_url"] = base_url
        self._client = _genai.Client(api_key=api_key, http_options=_types.HttpOptions(**options))

    def __repr__(self) -> str:
        return f"GoogleEmbedder({self.model!r}, dimensions={self.dimension})"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        config: dict[str, Any] = {}
        if self._send_dimensions:
            config["output_dimensionality"] = self.dimension
        if self.task_type is not None:
            config["task_type"] = self.task_type
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            reply = await self._client.aio.models.embed_content(
                model=self.model,
                contents=batch,
                config=_types.EmbedContentConfig(**config) if config else None,
            )
            embeddings = reply.embeddings or []
            if len(embeddings) != len(batch):
                msg = f"{self.model} returned {len(embeddings)} embeddings for {len(batch)} texts."
                raise ValueError(msg)
            for embedding in embeddings:
                values = [float(x) for x in embedding.values or []]
                if len(values) != self.dimension:
                    msg = (
                        f"{self.model} returned a vector of {len(values)} numbers where "
                        f"{self.dimension} were expected; pass the model's size as dimensions=."
                    )
                    raise ValueError(msg)
                vectors.append(values)
        return vectors
