"""``Embedder``: texts in, unit vectors out — the contract semantic search is built on, and a
deterministic local one for tests and offline use."""

from __future__ import annotations

import hashlib
import math
import operator
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence

__all__ = ["STOPWORDS", "Embedder", "HashingEmbedder", "cosine"]


class Embedder(ABC):
    """Turns texts into vectors of a fixed ``dimension``, in batches.

    ``name`` identifies the model (a store records it with every vector, so a store built
    with another embedder knows its vectors are stale).
    """

    #: The model's identity, e.g. ``"openai:text-embedding-3-small"``.
    name: str
    #: The length of every vector :meth:`embed` returns.
    dimension: int

    @abstractmethod
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""


_WORD = re.compile(r"\w+", re.UNICODE)

#: English words too common to say what a text is about ("what does the user like" should
#: match on "user" and "like", not on "the").
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "do",
        "does",
        "did",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "so",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)


class HashingEmbedder(Embedder):
    """Hashed bag of words (common English words left out) and character n-grams,
    L2-normalised: the same text always gets
    the same vector, on every machine, with no model, network or key.

    Texts that share words (or, through the n-grams, word stems) score high; it knows no
    synonyms, so use it for tests, examples and offline work, not for real recall.

    :param dimension: the vector length (more buckets, fewer collisions).
    :param ngram: the character n-gram length (``0`` turns n-grams off).
    """

    def __init__(self, dimension: int = 256, *, ngram: int = 3) -> None:
        if not isinstance(dimension, int) or dimension < 8:
            msg = f"HashingEmbedder(dimension=...) must be an int of at least 8, got {dimension!r}."
            raise ValueError(msg)
        if not isinstance(ngram, int) or ngram < 0:
            msg = f"HashingEmbedder(ngram=...) must be a non-negative int, got {ngram!r}."
            raise ValueError(msg)
        self.dimension = dimension
        self.ngram = ngram
        self.name = f"hashing:{dimension}:{ngram}"

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimension={self.dimension}, ngram={self.ngram})"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(text) for text in texts]

    def embed_one(self, text: str) -> list[float]:
        """The vector of one text (synchronously: it is pure arithmetic)."""
        vector = [0.0] * self.dimension
        for token, weight in self._features(text):
            digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimension
            sign = 1.0 if digest[4] & 1 else -1.0
            vector[bucket] += sign * weight
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector] if norm else vector

    def _features(self, text: str) -> list[tuple[str, float]]:
        features: list[tuple[str, float]] = []
        for word in _WORD.findall(text.lower()):
            if word in STOPWORDS:
                continue
            features.append((f"w:{word}", 1.0))
            if self.ngram and len(word) > self.ngram:
                padded = f"<{word}>"
                features.extend(
                    (f"g:{padded[i : i + self.ngram]}", 0.5)
                    for i in range(len(padded) - self.ngram + 1)
                )
        return features


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors (``0.0`` when either is all zeros)."""
    if len(a) != len(b):
        msg = f"cannot compare vectors of {len(a)} and {len(b)} numbers (two embedders?)."
        raise ValueError(msg)
    dot = sum(map(operator.mul, a, b))
    na = math.sqrt(sum(map(operator.mul, a, a)))
    nb = math.sqrt(sum(map(operator.mul, b, b)))
    return dot / (na * nb) if na and nb else 0.0
