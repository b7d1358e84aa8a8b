"""A small JSON-schema validator, for tools described by a raw schema (an MCP server's).

:meth:`tensorsketch.tools.Tool.validate` uses it when a tool has no pydantic model.
"""

from __future__ import annotations

import operator
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


# (keyword, holds when) for the numeric bounds; a bound that is not a number is ignored.
_BOUNDS: tuple[tuple[str, Callable[[Any, Any], bool]], ...] = (
    ("minimum", operator.ge),
    ("maximum", operator.le),
    ("exclusiveMinimum", operator.gt),
    ("exclusiveMaximum", operator.lt),
)


def validate_json(schema: Any, value: Any, path: str = "", root: Any = None) -> list[str]:
    """Validate ``value`` against the common JSON-schema subset tool servers use.

    Covers ``type``, ``properties``/``required``/``additionalProperties``, ``items``,
    ``enum``/``const``, numeric and length bounds, ``anyOf``/``oneOf``/``allOf`` and local
    ``$ref``. Returns readable problems (empty when valid); unknown keywords are ignored.
    """
    if not isinstance(schema, dict):
        return []
    root = schema if root is None else root
    if "$ref" in schema:
        return _validate_ref(schema["$ref"], value, path, root)
    where = f"`{path}`" if path else "the arguments"
    wrong_type = _type_problem(schema.get("type"), value, where)
    if wrong_type is not None:
        return [wrong_type]  # the other keywords would only repeat it
    problems = _value_problems(schema, value, where)
    if isinstance(value, dict):
        problems.extend(_object_problems(schema, value, path, root))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for k, item in enumerate(value):
            problems.extend(validate_json(schema["items"], item, f"{path}[{k}]", root))
    problems.extend(_combinator_problems(schema, value, path, where, root))
    return problems


def _validate_ref(ref: Any, value: Any, path: str, root: Any) -> list[str]:
    """Follow a local ``#/...`` reference; any other kind is not checked."""
    if not (isinstance(ref, str) and ref.startswith("#/")):
        return []
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part) if isinstance(target, dict) else None
    return validate_json(target, value, path, root)


def _type_problem(kind: Any, value: Any, where: str) -> str | None:
    """The problem when ``value`` is none of the ``type`` keyword's kinds (unknown kinds pass)."""
    if kind is None:
        return None
    kinds = kind if isinstance(kind, list) else [kind]
    if any(_JSON_TYPES.get(k, lambda v: True)(value) for k in kinds):
        return None
    shown = " or ".join(str(k) for k in kinds)
    return f"{where}: expected {shown}, got {_json_kind(value)} ({value!r:.60})"


def _value_problems(schema: dict[str, Any], value: Any, where: str) -> list[str]:
    """``enum``/``const``, then the numeric bounds or the length bounds, whichever apply."""
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: must be one of {schema['enum']!r}, got {value!r:.60}")
    if "const" in schema and value != schema["const"]:
        problems.append(f"{where}: must be {schema['const']!r}, got {value!r:.60}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        for key, holds in _BOUNDS:
            bound = schema.get(key)
            if isinstance(bound, int | float) and not holds(value, bound):
                problems.append(f"{where}: {value!r} violates {key} {bound!r}")
    if isinstance(value, str | list):
        problems.extend(_length_problems(schema, value, where))
    return problems


def _length_problems(schema: dict[str, Any], value: str | list[Any], where: str) -> list[str]:
    """``minLength``/``maxLength`` for a string, ``minItems``/``maxItems`` for an array."""
    if isinstance(value, str):
        low_key, high_key = "minLength", "maxLength"
    else:
        low_key, high_key = "minItems", "maxItems"
    problems: list[str] = []
    low, high = schema.get(low_key), schema.get(high_key)
    if isinstance(low, int) and len(value) < low:
        problems.append(f"{where}: shorter than {low_key} {low}")
    if isinstance(high, int) and len(value) > high:
        problems.append(f"{where}: longer than {high_key} {high}")
    return problems


def _object_problems(
    schema: dict[str, Any], value: dict[str, Any], path: str, root: Any
) -> list[str]:
    """Missing ``required`` names, then each member against its property or the extras rule."""
    props = schema.get("properties") or {}
    problems = [
        f"`{_join(path, name)}`: missing required argument"
        for name in schema.get("required") or ()
        if name not in value
    ]
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in props:
            problems.extend(validate_json(props[name], item, _join(path, name), root))
        elif extra is False:
            problems.append(f"`{_join(path, name)}`: unexpected argument")
        elif isinstance(extra, dict):
            problems.extend(validate_json(extra, item, _join(path, name), root))
    return problems


def _combinator_problems(
    schema: dict[str, Any], value: Any, path: str, where: str, root: Any
) -> list[str]:
    """``anyOf``/``oneOf`` (how many options pass), then every ``allOf`` part's problems."""
    problems: list[str] = []
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
