"""templates/plugin/, filled in by tools/new_plugin.py, is a working third-party plugin: pip
installed into a fresh venv, `tensorsketch plugins` lists it and its own test passes."""

from __future__ import annotations

import re
import runpy
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
new_plugin = runpy.run_path(str(ROOT / "tools" / "new_plugin.py"))


def test_filling_in_leaves_no_placeholder(tmp_path: Path) -> None:
    dest = new_plugin["render"]("acme-cloud", tmp_path / "acme-cloud-tensorsketch")
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert "src/acme_cloud_tensorsketch/plugin.py" in files
    assert "src/acme_cloud_tensorsketch/py.typed" in files
    pyproject = (dest / "pyproject.toml").read_text()
    assert 'name = "acme-cloud-tensorsketch"' in pyproject
    assert 'acme-cloud = "acme_cloud_tensorsketch.plugin"' in pyproject
    assert (
        "class AcmeCloudProvider(" in (dest / "src/acme_cloud_tensorsketch/provider.py").read_text()
    )


def test_a_bad_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lowercase name"):
        new_plugin["render"]("Acme Cloud", tmp_path / "x")


@pytest.mark.slow
def test_the_template_installs_and_is_listed(tmp_path: Path, venvs: Any) -> None:
    dest = new_plugin["render"]("zeta", tmp_path / "zeta-tensorsketch")
    python = venvs.make(tmp_path / "venv")
    venvs.install(python, str(ROOT / "packages" / "tensorsketch-core"), f"{dest}[test]")
    listing = subprocess.run(
        [str(python.parent / "tensorsketch"), "plugins"], check=True, capture_output=True, text=True
    )
    assert "zeta-tensorsketch 0.1.0" in listing.stdout, listing.stdout
    assert "tensorsketch_providers" in listing.stdout, listing.stdout
    assert re.search(r"^Providers:.*\bzeta\b", listing.stdout, re.M), listing.stdout
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=dest,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout
