"""The two ways an edit request can be refused before anything is written."""

from __future__ import annotations

__all__ = ["BadEdit", "EditRejected"]


class BadEdit(ValueError):
    """The request is malformed (a missing or mistyped argument): HTTP 400."""


class EditRejected(ValueError):
    """The edit is well formed but illegal (unknown node, an edge into START, a port the
    state does not have...): HTTP 422 with this message."""
