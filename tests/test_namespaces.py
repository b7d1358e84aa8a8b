"""The `tensorsketch` namespace joins across distributions: editable (this venv) and wheels."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tensorsketch._install_hints import HINTS

ROOT = Path(__file__).resolve().parent.parent

# Every portion of the namespace that a whole distribution ships (no extra needed), read from
# the one install-hint table.
PORTIONS = {module: dist for module, dist in HINTS.items() if "[" not in dist}


def test_editable_layout_imports_every_portion_from_its_own_folder() -> None:
    import tensorsketch

    assert set(PORTIONS) == {
        "tensorsketch.canvas",
        "tensorsketch.serve",
        "tensorsketch.eval",
        "tensorsketch.ray",
        "tensorsketch.interop",
        "tensorsketch.providers",
    }

    assert tensorsketch.Graph.__module__ == "tensorsketch.graph"
    for module_name, dist in PORTIONS.items():
        module = importlib.import_module(module_name)
        paths = [str(p) for p in getattr(module, "__path__", [])]
        assert any(f"packages/{dist}/src" in p for p in paths), (module_name, paths)


def test_editable_layout_reaches_backends_from_the_shared_level() -> None:
    from tensorsketch.runtime import backends

    assert any("tensorsketch-backends" in p for p in backends.__path__)
    assert any("tensorsketch-core" in p for p in backends.__path__)


CHECK = """
import importlib, json, sys
import tensorsketch
found = {}
for name in %r:
    module = importlib.import_module(name)
    found[name] = [p for p in getattr(module, "__path__", [])]
from tensorsketch import Graph, Schema, START, END
print(json.dumps({"found": found, "graph": Graph.__module__}))
"""


@pytest.mark.slow
def test_wheel_layout_in_a_clean_venv(tmp_path: Path, wheel_dir: Path, venvs: Any) -> None:
    python = venvs.make(tmp_path / "venv")
    wheels = [str(w) for w in wheel_dir.glob("tensorsketch*.whl")]
    venvs.install(python, "--find-links", str(wheel_dir), *wheels)
    out = subprocess.run(
        [str(python), "-c", CHECK % list(PORTIONS)],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(out.stdout)
    assert result["graph"] == "tensorsketch.graph"
    for name, paths in result["found"].items():
        assert all("site-packages" in p for p in paths), (name, paths)
    listing = subprocess.run(
        [str(python.parent / "tensorsketch"), "plugins", "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    plugins = json.loads(listing.stdout)
    names = {p["name"]: p["distribution"] for p in plugins["plugins"]}
    assert names == {
        "core": "tensorsketch-core",
        "canvas": "tensorsketch-canvas",
        "providers": "tensorsketch-providers",
        "backends": "tensorsketch-backends",
        "serve": "tensorsketch-serve",
        "interop": "tensorsketch-interop",
        "eval": "tensorsketch-eval",
        "ray": "tensorsketch-ray",
    }
    assert plugins["failed"] == {}


@pytest.mark.slow
@pytest.mark.parametrize("installer", ["uv", "bundled-pip"])
def test_meta_package_from_the_repo_installs_the_first_party_set(
    tmp_path: Path, venvs: Any, installer: str
) -> None:
    meta = str(ROOT / "packages" / "tensorsketch")
    if installer == "bundled-pip":
        # `python3 -m venv` and the pip it ships, as a user without uv does it. That pip can be
        # old: Python 3.11.7 bundles pip 23.2.1, which did not let a sibling folder given as
        # `name[extra] @ file://...` satisfy another sibling's `name==version`.
        python = tmp_path / "venv" / "bin" / "python"
        subprocess.run([sys.executable, "-m", "venv", str(python.parent.parent)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", meta], check=True, timeout=900)
    else:
        python = venvs.make(tmp_path / "venv")
        venvs.install(python, meta)
    listing = subprocess.run(
        [str(python.parent / "tensorsketch"), "plugins", "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    plugins = json.loads(listing.stdout)
    # Not tensorsketch-ray: Ray is opt-in (`tensorsketch[ray]`).
    assert {p["distribution"] for p in plugins["plugins"]} == {
        "tensorsketch-core",
        "tensorsketch-canvas",
        "tensorsketch-providers",
        "tensorsketch-backends",
        "tensorsketch-serve",
        "tensorsketch-interop",
        "tensorsketch-eval",
    }
    assert plugins["failed"] == {}
