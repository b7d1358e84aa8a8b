"""A backend named on a command line: ``sqlite:///runs.db``, ``postgresql://...``,
``redis://...`` or a registry name (``memory``, a plugin's).

Every command that takes ``--backend`` (``tensorsketch serve``, the Studio) reads it here, so a
DSN means the same store everywhere. The backend itself is built through
:func:`tensorsketch.registry.create_backend`: a driver loads only when its URL is named.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from tensorsketch.registry import create_backend
from tensorsketch.runtime.backends.base import Backend

__all__ = ["backend_label", "open_backend", "parse_backend_options"]

#: URL schemes and the registry names they select.
_SCHEMES = {
    "sqlite": "sqlite",
    "postgres": "postgres",
    "postgresql": "postgres",
    "redis": "redis",
    "rediss": "redis",
}


def open_backend(url: str, options: Mapping[str, str] | None = None) -> Backend:
    """The backend a ``--backend`` value names: a URL (``sqlite:///runs.db``,
    ``postgresql://...``, ``redis://...``) or a registry name (``memory``, a plugin's).

    :param options: keyword arguments for the backend's constructor, as strings
        (``--backend-option schema=tenant1`` for PostgreSQL, ``prefix=app`` for Redis).
    """
    if not isinstance(url, str) or not url.strip():
        msg = "--backend needs a URL such as sqlite:///runs.db or a backend name."
        raise ValueError(msg)
    kwargs: dict[str, Any] = dict(options or {})
    scheme, sep, _ = url.partition("://")
    if not sep:
        return create_backend(url, **kwargs)
    name = _SCHEMES.get(scheme.lower(), scheme.lower())
    return create_backend(name, dsn=url, **kwargs)


def parse_backend_options(pairs: list[str] | None) -> dict[str, str]:
    """``--backend-option KEY=VALUE`` values as a dict; :class:`ValueError` names a bad one."""
    options: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            msg = f"--backend-option takes KEY=VALUE (e.g. schema=tenant1), got {pair!r}."
            raise ValueError(msg)
        options[key.strip()] = value
    return options


def backend_label(url: str, backend: Backend) -> str:
    """What may be shown of the backend: the SQLite file, or host/port/database — never a
    user name, password or query string."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return backend.name
    if scheme.lower() == "sqlite":
        path = rest[1:] if rest.startswith("/") else rest
        return os.path.basename(path) or ":memory:"
    try:
        parts = urlsplit(url)
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return backend.name
    return f"{host}{port}{parts.path}"
