"""The module the `tensorsketch` entry point names: one function per hook it implements.

Keep this module light (it is imported whenever TensorSketch loads its plugins): contribute
``"module:Attribute"`` strings, which are imported only when the name is first used.
"""

from __future__ import annotations

from tensorsketch import hookimpl


@hookimpl
def tensorsketch_providers() -> dict[str, str]:
    return {"yourname": "yourname_tensorsketch.provider:YournameProvider"}
