"""Say which distribution to install when a documented module is missing.

A finder appended to the *end* of ``sys.meta_path`` is consulted only after every real finder
failed, so it costs nothing for modules that exist. For the documented subpackages it raises a
``ModuleNotFoundError`` that names the distribution (and extra) to install — or, when that
distribution *is* installed and simply has no such module, says so instead of telling the
user to install what they already have.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["HINTS", "install"]

#: Documented module -> the pip requirement that provides it.
HINTS: dict[str, str] = {
    "tensorsketch.canvas": "tensorsketch-canvas",
    "tensorsketch.serve": "tensorsketch-serve",
    "tensorsketch.eval": "tensorsketch-eval",
    "tensorsketch.ray": "tensorsketch-ray",
    "tensorsketch.interop": "tensorsketch-interop",
    "tensorsketch.interop.mcp": "tensorsketch-interop[mcp]",
    "tensorsketch.observability.otel": "tensorsketch-interop[otel]",
    "tensorsketch.providers": "tensorsketch-providers",
    "tensorsketch.providers.anthropic": "tensorsketch-providers[anthropic]",
    "tensorsketch.providers.openai": "tensorsketch-providers[openai]",
    "tensorsketch.providers.google": "tensorsketch-providers[google]",
    "tensorsketch.runtime.backends.postgres": "tensorsketch-backends[postgres]",
    "tensorsketch.runtime.backends.redis": "tensorsketch-backends[redis]",
}


class _HintFinder:
    """A meta-path finder (duck-typed: importing ``importlib.abc`` would cost ~10 ms)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> None:
        requirement = HINTS.get(fullname)
        if requirement is None:
            return
        dist = requirement.split("[")[0]
        version = _installed_version(dist)
        if version is not None:
            msg = (
                f"No module named {fullname!r}: {dist} {version} is installed but has no module "
                f"{fullname}; it is not available in this release of {dist}."
            )
        else:
            msg = (
                f"No module named {fullname!r}: it comes with the {dist!r} distribution. "
                f'Install it with `pip install "{requirement}"` '
                '(or `pip install "tensorsketch[all]"` for everything).'
            )
        raise ModuleNotFoundError(msg, name=fullname)


def _installed_version(dist: str) -> str | None:
    """The installed version of ``dist``, or ``None`` (only asked on a failed import)."""
    from importlib import metadata  # noqa: PLC0415 - package metadata, only when a hint is shown

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


_FINDER = _HintFinder()


def install() -> None:
    """Append the hint finder to ``sys.meta_path`` once."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
