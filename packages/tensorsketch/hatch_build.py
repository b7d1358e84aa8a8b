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
    "tensorsketch-ray",
]
#: First-party distributions only an extra brings: Ray is ~200 MiB installed and a GiB running,
#: which a single-process deployment never needs (`tensorsketch[ray]` opts in).
OPT_IN = {"tensorsketch-ray"}
#: Extras the plain install takes (SPEC-NOTES "Packaging": `pip install tensorsketch` is the one
#: install where everything works): msgpack checkpoints, every provider SDK, MCP, the OTel
#: bridge and A2A serving.
DEFAULT_EXTRAS = {
    "tensorsketch-core": "msgpack",
    "tensorsketch-providers": "all",
    "tensorsketch-interop": "all",
    "tensorsketch-serve": "a2a",
}
#: Opt-in: database drivers and the Ray worker pool, which a server needs only if it uses them.
EXTRAS: dict[str, list[tuple[str, str | None]]] = {
    "postgres": [("tensorsketch-backends", "postgres")],
    "redis": [("tensorsketch-backends", "redis")],
    "ray": [("tensorsketch-ray", None)],
    "all": [("tensorsketch-backends", "all"), ("tensorsketch-ray", None)],
    # Kept so `tensorsketch[openai]` etc. written for 0.1.0 still resolve (now in the default).
    "anthropic": [("tensorsketch-providers", "anthropic")],
    "openai": [("tensorsketch-providers", "openai")],
    "google": [("tensorsketch-providers", "google")],
    "mcp": [("tensorsketch-interop", "mcp")],
    "otel": [("tensorsketch-interop", "otel")],
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

        metadata["dependencies"] = [
            requirement(d, DEFAULT_EXTRAS.get(d)) for d in FIRST_PARTY if d not in OPT_IN
        ]
        if local:
            # Each sibling taken with an extra is named bare too, so that another sibling's
            # `name==version` resolves to the folder under pip < 23.3 (Python 3.11.7's venv
            # ships 23.2.1, which reports "No matching distribution" without this line).
            metadata["dependencies"] += [
                requirement(d) for d in FIRST_PARTY if d not in OPT_IN and d in DEFAULT_EXTRAS
            ]
        metadata["optional-dependencies"] = {
            extra: [requirement(dist, sub) for dist, sub in pairs]
            for extra, pairs in EXTRAS.items()
        }
