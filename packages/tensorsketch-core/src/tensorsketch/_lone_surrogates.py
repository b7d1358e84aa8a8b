"""Lone UTF-16 surrogates in request bodies: valid JSON (``"\\ud800"``), not Unicode text.

``json.loads`` turns such an escape into a ``str`` that no UTF-8 encoder takes, so a value
stored with one fails every later answer that carries it. The servers that parse JSON bodies
(the protocol apps, the Studio) refuse it up front with :func:`has_lone_surrogate`.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["has_lone_surrogate"]

#: A JSON escape of a surrogate code point (``\ud800`` to ``\udfff``), as body bytes.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def has_lone_surrogate(body: bytes, data: Any) -> bool:
    """Whether ``data``, parsed from ``body``, holds a string with a lone surrogate. A body
    without a surrogate escape (nearly all) is not walked; one with an escaped pair (an
    emoji) is, and passes."""
    if _SURROGATE_ESCAPE.search(body) is None:
        return False
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    except (ValueError, RecursionError):  # (what json.loads built, it can write)
        return False
    return False
