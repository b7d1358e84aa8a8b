"""A backend contributed through the simple `tensorsketch.backends` entry-point group."""

from __future__ import annotations

from tensorsketch.runtime.backends.memory import InMemoryBackend


class AcmeBackend(InMemoryBackend):
    name = "acme-db"
