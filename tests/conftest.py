"""Shared fixtures for the cross-package integration tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# LiteLLM fetches its price list from GitHub when imported: keep every test on 127.0.0.1.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def _uv() -> list[str] | None:
    """uv on PATH, or beside this interpreter (`.venv/bin/python -m pytest` without activating
    the venv: uv is in `.venv/bin`, not on PATH)."""
    from shutil import which

    found = which("uv") or which("uv", path=str(Path(sys.executable).parent))
    return [found] if found else None


def make_venv(path: Path) -> Path:
    """A fresh virtualenv (uv when available, else stdlib venv + pip). Returns its python."""
    uv = _uv()
    if uv:
        subprocess.run([*uv, "venv", "-q", "-p", sys.executable, str(path)], check=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin" / "python"


def pip_install(python: Path, *args: str) -> None:
    uv = _uv()
    cmd = (
        [*uv, "pip", "install", "-q", "-p", str(python)]
        if uv
        else [str(python), "-m", "pip", "install", "-q"]
    )
    subprocess.run([*cmd, *args], check=True, timeout=900)


class Venvs:
    """Helpers to make throwaway virtualenvs (a fixture, since tests cannot import conftest)."""

    root = ROOT
    #: Whether installs go through uv (else stdlib venv + the venv's own pip).
    uses_uv = _uv() is not None

    @staticmethod
    def uv() -> list[str]:
        """The uv command (only when :attr:`uses_uv`)."""
        found = _uv()
        assert found is not None, "uv is not installed"
        return found

    @staticmethod
    def make(path: Path) -> Path:
        return make_venv(path)

    @staticmethod
    def install(python: Path, *args: str) -> None:
        pip_install(python, *args)


@pytest.fixture(scope="session")
def venvs() -> Venvs:
    return Venvs()


@pytest.fixture(scope="session")
def wheel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every first-party distribution (and the sample plugin) built as a wheel, once."""
    out = tmp_path_factory.mktemp("wheels")
    dists = sorted(p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())
    env = {**os.environ, "TENSORSKETCH_RELEASE": "1"}
    for dist in [*dists, ROOT / "tests" / "acme_plugin"]:
        subprocess.run(
            [sys.executable, "-m", "uv", "build", "--wheel", "--out-dir", str(out), str(dist)],
            check=True,
            capture_output=True,
            env=env,
            timeout=600,
        )
    return out
