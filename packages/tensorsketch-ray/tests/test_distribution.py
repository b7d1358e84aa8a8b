"""The distribution installs as a namespace portion, registers its plugin, and keeps Ray
unimported until used."""

from __future__ import annotations

import importlib
import subprocess
import sys
from importlib import metadata

import tensorsketch
from tensorsketch.plugins import plugin_infos


def test_namespace_portion_imports_beside_core() -> None:
    module = importlib.import_module("tensorsketch.ray")
    assert module.__name__ == "tensorsketch.ray"
    assert hasattr(tensorsketch, "Graph"), "core's API stays reachable next to the portion"


def test_plugin_is_registered_through_the_entry_point() -> None:
    infos = {info.name: info for info in plugin_infos()}
    assert infos["ray"].distribution == "tensorsketch-ray"
    assert infos["ray"].version == metadata.version("tensorsketch-ray")


def test_the_portion_does_not_shadow_or_import_ray() -> None:
    code = (
        "import sys, tensorsketch.ray, tensorsketch.ray.testing\n"
        "assert 'ray' not in sys.modules, 'importing tensorsketch.ray loaded Ray'\n"
        "import ray\n"
        "print(ray.__name__, hasattr(ray, 'remote'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ray", "True"]
