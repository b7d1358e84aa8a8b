"""Docstring parsing for ``@tool``: the description and per-parameter texts.

Understands Google, NumPy and Sphinx styles. Re-exported as
:func:`tensorsketch.tools.parse_docstring`, where it is documented.
"""

from __future__ import annotations

import inspect
import re

__all__ = ["parse_docstring"]

_GOOGLE_HEADERS = ("args:", "arguments:", "parameters:", "params:", "keyword args:")
_SECTION_RE = re.compile(
    r"^(args|arguments|parameters|params|keyword args|returns?|yields?|raises|examples?|"
    r"notes?|see also|attributes)\s*:?\s*$",
    re.IGNORECASE,
)


_SPHINX_PARAM_RE = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")
_SPHINX_FIELD_RE = re.compile(r"^:\w+")
_NUMPY_UNDERLINE_RE = re.compile(r"^-{3,}\s*$")
_NUMPY_PARAM_HEADERS = ("parameters", "other parameters", "keyword arguments")
_NUMPY_ENTRY_RE = re.compile(r"^(\w+)\s*(?::.*)?$")
_GOOGLE_ENTRY_RE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_INDENT = (" ", "\t")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and per-parameter descriptions.

    Understands Google (``Args:`` with ``name (type): text``), NumPy (``Parameters`` underlined
    with dashes, ``name : type`` then indented text) and Sphinx (``:param name: text``) styles.
    """
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    params: dict[str, str] = {}
    summary: list[str] = []
    i = 0
    in_summary = True
    while i < len(lines):
        end = _parse_section(lines, i, params)
        if end is not None:
            in_summary = False  # the description is the prose before the first section
            i = end
            continue
        if in_summary:
            summary.append(lines[i])
        i += 1
    return "\n".join(summary).strip(), params


def _parse_section(lines: list[str], i: int, params: dict[str, str]) -> int | None:
    """Read the section or field that starts at line ``i`` into ``params``.

    Returns the index of the first line after it, or ``None`` when line ``i`` is prose.
    """
    stripped = lines[i].strip()
    lower = stripped.lower()
    # Sphinx: ":param [type] name: text"
    sphinx = _SPHINX_PARAM_RE.match(stripped)
    if sphinx:
        return _sphinx_param(lines, i + 1, sphinx, params)
    if stripped.startswith(":") and _SPHINX_FIELD_RE.match(stripped):
        return i + 1
    # NumPy: a header line followed by a dashed underline.
    if i + 1 < len(lines) and _NUMPY_UNDERLINE_RE.match(lines[i + 1].strip()):
        if lower in _NUMPY_PARAM_HEADERS:
            return _numpy_params(lines, i + 2, params)
        return i + 2
    # Google: "Args:" then indented "name (type): text" entries.
    if lower in _GOOGLE_HEADERS:
        return _google_params(lines, i + 1, params)
    if _SECTION_RE.match(stripped) and stripped.endswith(":"):
        return _skip_indented(lines, i + 1)
    return None


def _sphinx_param(lines: list[str], i: int, match: re.Match[str], params: dict[str, str]) -> int:
    """A ``:param name: text`` field whose text may go on in indented lines from ``i``."""
    text = [match.group(2).strip()]
    while i < len(lines) and lines[i].startswith(_INDENT) and lines[i].strip():
        text.append(lines[i].strip())
        i += 1
    params[match.group(1)] = " ".join(t for t in text if t)
    return i


def _numpy_params(lines: list[str], i: int, params: dict[str, str]) -> int:
    """NumPy entries from ``i`` (``name : type`` then indented text), up to the next section."""
    while i < len(lines):
        entry = lines[i]
        if not entry.strip() or entry.startswith(_INDENT):
            i += 1
            continue
        if i + 1 < len(lines) and _NUMPY_UNDERLINE_RE.match(lines[i + 1].strip()):
            break
        match = _NUMPY_ENTRY_RE.match(entry.strip())
        if not match:
            break
        i, text = _numpy_text(lines, i + 1)
        params[match.group(1)] = text
    return i


def _numpy_text(lines: list[str], i: int) -> tuple[int, str]:
    """One NumPy entry's indented description from ``i``: (the index after it, its text).

    A blank line ends it once it has text and the next line is not indented.
    """
    text: list[str] = []
    while i < len(lines) and (lines[i].startswith(_INDENT) or not lines[i].strip()):
        if lines[i].strip():
            text.append(lines[i].strip())
        elif text and i + 1 < len(lines) and not lines[i + 1].startswith(" "):
            break
        i += 1
    return i, " ".join(text)


def _google_params(lines: list[str], i: int, params: dict[str, str]) -> int:
    """Google entries from ``i``: the first entry's indent marks entries, deeper lines go on."""
    current: str | None = None
    indent: int | None = None
    while i < len(lines):
        entry = lines[i]
        if not entry.strip():
            i += 1
            continue
        width = len(entry) - len(entry.lstrip())
        if width == 0:
            break
        if indent is None:
            indent = width
        match = _GOOGLE_ENTRY_RE.match(entry.strip())
        if width == indent and match:
            current = match.group(1).lstrip("*")
            params[current] = match.group(2).strip()
        elif current is not None:
            params[current] = (params[current] + " " + entry.strip()).strip()
        i += 1
    return i


def _skip_indented(lines: list[str], i: int) -> int:
    """Past another section's body (``Returns:``, ``Raises:`` ...): blank or indented lines."""
    while i < len(lines) and (not lines[i].strip() or lines[i].startswith(_INDENT)):
        i += 1
    return i
