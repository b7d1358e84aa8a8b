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
        line = lines[i]
        stripped = line.strip()
        lower = stripped.lower()
        # Sphinx: ":param [type] name: text"
        sphinx = re.match(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$", stripped)
        if sphinx:
            in_summary = False
            name, text = sphinx.group(1), [sphinx.group(2).strip()]
            i += 1
            while i < len(lines) and lines[i].startswith((" ", "\t")) and lines[i].strip():
                text.append(lines[i].strip())
                i += 1
            params[name] = " ".join(t for t in text if t)
            continue
        if stripped.startswith(":") and re.match(r"^:\w+", stripped):
            in_summary = False
            i += 1
            continue
        # NumPy: a header line followed by a dashed underline.
        is_numpy_header = i + 1 < len(lines) and re.match(r"^-{3,}\s*$", lines[i + 1].strip())
        if is_numpy_header:
            in_summary = False
            header = lower
            i += 2
            if header in ("parameters", "other parameters", "keyword arguments"):
                while i < len(lines):
                    entry = lines[i]
                    if not entry.strip():
                        i += 1
                        continue
                    if entry.startswith((" ", "\t")):
                        i += 1
                        continue
                    if i + 1 < len(lines) and re.match(r"^-{3,}\s*$", lines[i + 1].strip()):
                        break
                    match = re.match(r"^(\w+)\s*(?::.*)?$", entry.strip())
                    if not match:
                        break
                    name = match.group(1)
                    i += 1
                    text = []
                    while i < len(lines) and (
                        lines[i].startswith((" ", "\t")) or not lines[i].strip()
                    ):
                        if lines[i].strip():
                            text.append(lines[i].strip())
                        elif text and i + 1 < len(lines) and not lines[i + 1].startswith(" "):
                            break
                        i += 1
                    params[name] = " ".join(text)
            continue
        # Google: "Args:" then indented "name (type): text" entries.
        if lower in _GOOGLE_HEADERS:
            in_summary = False
            i += 1
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
                match = re.match(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", entry.strip())
                if width == indent and match:
                    current = match.group(1).lstrip("*")
                    params[current] = match.group(2).strip()
                elif current is not None:
                    params[current] = (params[current] + " " + entry.strip()).strip()
                i += 1
            continue
        if _SECTION_RE.match(stripped) and stripped.endswith(":"):
            in_summary = False
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                i += 1
            continue
        if in_summary:
            summary.append(line)
        i += 1
    return "\n".join(summary).strip(), params
