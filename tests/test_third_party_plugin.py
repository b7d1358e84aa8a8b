"""A third-party plugin, pip-installed into a fresh venv, becomes selectable by name."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import json, os, sys
from tensorsketch import create_provider, create_backend
from tensorsketch.registry import providers, backends
names = providers.names()
loaded_before = "ACME_PROVIDER_IMPORTED" in os.environ
acme = create_provider("acme", model="m1")
db = create_backend("acme-db")
print(json.dumps({
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
