"""The distribution installs as a namespace portion and registers its plugin."""

from __future__ import annotations

import importlib
from importlib import metadata

import tensorsketch
from tensorsketch.plugins import plugin_infos


def test_namespace_portion_imports_beside_core() -> None:
    module = importlib.import_module("tensorsketch.eval")
    assert module.__name__ == "tensorsketch.eval"
    assert hasattr(tensorsketch, "Graph"), "core's API stays reachable next to the portion"


def test_plugin_is_registered_through_the_entry_point() -> None:
    infos = {info.name: info for info in plugin_infos()}
    assert infos["eval"].distribution == "tensorsketch-eval"
    assert infos["eval"].version == metadata.version("tensorsketch-eval")
