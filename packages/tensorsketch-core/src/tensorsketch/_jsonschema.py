"""A small JSON-schema validator, for tools described by a raw schema (an MCP server's).

:meth:`tensorsketch.tools.Tool.validate` uses it when a tool has no pydantic model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["validate_json"]

_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def validate_json(schema: Any, value: Any, path: str = "", root: Any = None) -> list[str]:
    """Validate ``value`` against the common JSON-schema subset tool servers use.

    Covers ``type``, ``properties``/``required``/``additionalProperties``, ``items``,
    ``enum``/``const``, numeric and length bounds, ``anyOf``/``oneOf``/``allOf`` and local
    ``$ref``. Returns readable problems (empty when valid); unknown keywords are ignored.
    """
    if not isinstance(schema, dict):
        return []
    root = schema if root is None else root
    where = f"`{path}`" if path else "the arguments"
    if "$ref" in schema:
        ref = schema["$ref"]
        target: Any = root
        if isinstance(ref, str) and ref.startswith("#/"):
            for part in ref[2:].split("/"):
                target = target.get(part) if isinstance(target, dict) else None
            return validate_json(target, value, path, root)
        return []
    problems: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_JSON_TYPES.get(k, lambda v: True)(value) for k in kinds):
            shown = " or ".join(str(k) for k in kinds)
            return [f"{where}: expected {shown}, got {_json_kind(value)} ({value!r:.60})"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: must be one of {schema['enum']!r}, got {value!r:.60}")
    if "const" in schema and value != schema["const"]:
        problems.append(f"{where}: must be {schema['const']!r}, got {value!r:.60}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        checks: tuple[tuple[str, Callable[[float], bool]], ...] = (
            ("minimum", lambda b: value >= b),
            ("maximum", lambda b: value <= b),
            ("exclusiveMinimum", lambda b: value > b),
            ("exclusiveMaximum", lambda b: value < b),
        )
        for key, ok in checks:
            bound = schema.get(key)
            if isinstance(bound, int | float) and not ok(bound):
                problems.append(f"{where}: {value!r} violates {key} {bound!r}")
    if isinstance(value, str | list):
        low_key, high_key = (
            ("minLength", "maxLength")
            if isinstance(value, str)
            else (
                "minItems",
                "maxItems",
            )
        )
        low, high = schema.get(low_key), schema.get(high_key)
        if isinstance(low, int) and len(value) < low:
            problems.append(f"{where}: shorter than {low_key} {low}")
        if isinstance(high, int) and len(value) > high:
            problems.append(f"{where}: longer than {high_key} {high}")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name in schema.get("required") or ():
            if name not in value:
                problems.append(f"`{_join(path, name)}`: missing required argument")
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in props:
                problems.extend(validate_json(props[name], item, _join(path, name), root))
            elif extra is False:
                problems.append(f"`{_join(path, name)}`: unexpected argument")
            elif isinstance(extra, dict):
                problems.extend(validate_json(extra, item, _join(path, name), root))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for k, item in enumerate(value):
            problems.extend(validate_json(schema["items"], item, f"{path}[{k}]", root))
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            passing = sum(1 for o in options if not validate_json(o, value, path, root))
            if passing == 0 or (key == "oneOf" and passing > 1):
                problems.append(f"{where}: does not match {key} of the schema")
    for sub in schema.get("allOf") or ():
        problems.extend(validate_json(sub, value, path, root))
    return problems


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _json_kind(value: Any) -> str:
    for name, check in _JSON_TYPES.items():
        if name != "integer" and check(value):
            return name
    return type(value).__name__
