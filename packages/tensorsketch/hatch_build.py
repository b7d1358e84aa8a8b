"""Write the meta-package's dependencies: sibling folders in a checkout, pins for a release."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hatchling.metadata.plugin.interface import MetadataHookInterface

FIRST_PARTY = [
    "tensorsketch-core",
    "tensorsketch-canvas",
    "tensorsketch-providers",
    "tensorsketch-backends",
    "tensorsketch-serve",
    "tensorsketch-interop",
    "tensorsketch-eval",
]
EXTRAS = {
    "anthropic": [("tensorsketch-providers", "anthropic")],
    "openai": [("tensorsketch-providers", "openai")],
    "google": [("tensorsketch-providers", "google")],
    "postgres": [("tensorsketch-backends", "postgres")],
    "redis": [("tensorsketch-backends", "redis")],
    "mcp": [("tensorsketch-interop", "mcp")],
    "otel": [("tensorsketch-interop", "otel")],
    "all": [
        ("tensorsketch-providers", "all"),
        ("tensorsketch-backends", "all"),
        ("tensorsketch-interop", "all"),
    ],
}


class CustomMetadataHook(MetadataHookInterface):
    def update(self, metadata: dict[str, Any]) -> None:
        version = metadata["version"]
        siblings = Path(self.root).parent
        local = os.environ.get("TENSORSKETCH_RELEASE") != "1" and all(
            (siblings / dist / "pyproject.toml").is_file() for dist in FIRST_PARTY
        )

        def requirement(dist: str, extra: str | None = None) -> str:
            name = f"{dist}[{extra}]" if extra else dist
            if local:
                return f"{name} @ {(siblings / dist).resolve().as_uri()}"
            return f"{name}=={version}"

        metadata["dependencies"] = [requirement(dist) for dist in FIRST_PARTY]
        metadata["optional-dependencies"] = {
            extra: [requirement(dist, sub) for dist, sub in pairs]
            for extra, pairs in EXTRAS.items()
        }
