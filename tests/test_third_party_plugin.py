"""A third-party plugin, pip-installed into a fresh venv, becomes selectable by name."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import asyncio, json, os, sys
from typing import Annotated
from tensorsketch import END, START, Context, Graph, Node, Schema
from tensorsketch import channel_marker, create_backend, create_provider, create_tracer
from tensorsketch.registry import providers, backends
names = providers.names()
loaded_before = "ACME_PROVIDER_IMPORTED" in os.environ
acme = create_provider("acme", model="m1")
db = create_backend("acme-db")
tracer = create_tracer("acme")

class Tags(Schema):
    tags: Annotated[list[str], channel_marker("acme-unique")] = []

class Tag(Node):
    class In(Schema):
        pass
    class Out(Schema):
        tags: list[str]
    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(tags=["a", "b", "a"])

app = Graph(Tags).add(Tag).edge(START, "Tag").edge("Tag", END).compile()
out = asyncio.run(app.invoke({"tags": ["b", "c"]}, tracer=tracer))
print(json.dumps({
    "tracer": getattr(tracer, "vendor", None),
    "spans": len(tracer.spans),
    "tags": out.tags,
    "names": names,
    "backends": backends.names(),
    "loaded_before_create": loaded_before,
    "model": acme.model,
    "type": type(acme).__module__ + ":" + type(acme).__name__,
    "db": type(db).__name__,
}))
"""


@pytest.mark.slow
def test_third_party_plugin_end_to_end(tmp_path: Path, venvs: Any) -> None:
    import json

    python = venvs.make(tmp_path / "venv")
    venvs.install(python, str(ROOT / "packages" / "tensorsketch-core"))
    venvs.install(python, str(ROOT / "tests" / "acme_plugin"))
    out = subprocess.run([str(python), "-c", SCRIPT], check=True, capture_output=True, text=True)
    result = json.loads(out.stdout)
    assert "acme" in result["names"] and "fake" in result["names"]
    assert "acme-db" in result["backends"]
    assert result["loaded_before_create"] is False, (
        "listing names must not import the plugin's provider"
    )
    assert result["model"] == "m1"
    assert result["type"] == "acme_tensorsketch.provider:AcmeProvider"
    assert result["db"] == "AcmeBackend"
    # The tracer hook and the channel-type hook take effect, not just register.
    assert result["tracer"] == "acme" and result["spans"] >= 2
    assert result["tags"] == ["b", "c", "a"]
    cli = subprocess.run(
        [str(python.parent / "tensorsketch"), "acme-hello", "world"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert cli.stdout.strip() == "acme says hello to world"
    listing = subprocess.run(
        [str(python.parent / "tensorsketch"), "plugins"], check=True, capture_output=True, text=True
    )
    assert "acme" in listing.stdout and "acme-tensorsketch 1.0.0" in listing.stdout
