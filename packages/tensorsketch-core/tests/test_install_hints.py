"""A documented module that cannot be imported says what to do: install the distribution that
ships it, or — when that distribution is installed without it — that this release lacks it."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util

import pytest

import tensorsketch  # noqa: F401 - installs the hint finder
from tensorsketch import _install_hints


def test_a_missing_distribution_gets_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        _install_hints.HINTS, "tensorsketch.feature_xyz", "tensorsketch-not-a-dist-xyz[extra]"
    )
    with pytest.raises(ModuleNotFoundError) as caught:
        importlib.import_module("tensorsketch.feature_xyz")
    message = str(caught.value)
    assert "it comes with the 'tensorsketch-not-a-dist-xyz' distribution" in message
    assert 'pip install "tensorsketch-not-a-dist-xyz[extra]"' in message
    assert caught.value.name == "tensorsketch.feature_xyz"


def test_an_installed_distribution_without_the_module_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tensorsketch-core is installed wherever this runs; pretend it documents a module it
    does not have."""
    monkeypatch.setitem(_install_hints.HINTS, "tensorsketch.feature_xyz", "tensorsketch-core")
    version = importlib.metadata.version("tensorsketch-core")
    with pytest.raises(ModuleNotFoundError) as caught:
        importlib.import_module("tensorsketch.feature_xyz")
    message = str(caught.value)
    assert (
        f"tensorsketch-core {version} is installed but has no module tensorsketch.feature_xyz"
        in message
    )
    assert "not available in this release" in message
    assert "pip install" not in message  # never "install what you already have"


def test_backend_class_hints_come_from_the_one_table() -> None:
    from tensorsketch.runtime import backends

    assert {
        "PostgresBackend": _install_hints.HINTS["tensorsketch.runtime.backends.postgres"],
        "RedisBackend": _install_hints.HINTS["tensorsketch.runtime.backends.redis"],
    } == backends._HINTS
    assert backends._HINTS["PostgresBackend"] == "tensorsketch-backends[postgres]"
