"""The serializer seam: how durable values become bytes.

:class:`JsonSerializer` is the default and is safe to load from a store an attacker can write
to: it decodes to plain data, and rebuilds a pydantic model only for a class that is
registered with it or already imported in this process — it never imports a module or runs
code chosen by the data. :class:`PickleSerializer` round-trips any object but executes code on
load; use it only for stores you trust, by asking for it explicitly (``serializer="pickle"``).
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import enum
import json
import pickle
import sys
import uuid
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from tensorsketch.errors import CheckpointDecodeError

__all__ = ["JsonSerializer", "PickleSerializer", "Serializer", "resolve_serializer"]

_TAG = "$t"
# How a tag key appears in encoded bytes (a string equal to it elsewhere would be escaped
# no differently, so its absence proves there is no tag; its presence just takes the hook).
_TAG_BYTES = json.dumps(_TAG).encode()
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


@runtime_checkable
class Serializer(Protocol):
    """Turns values into bytes and back. ``loads`` raises on data it cannot decode."""

    def dumps(self, obj: Any) -> bytes:
        """Encode ``obj``."""
        ...

    def loads(self, data: bytes) -> Any:
        """Decode bytes written by :meth:`dumps`."""
        ...


def _qualified(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


class JsonSerializer:
    """JSON with tagged types (tuples, bytes, datetimes, UUIDs, Decimals, enums, models).

    :param types: pydantic models / enums to rebuild by name. Without the list, a tagged
        class is rebuilt only if its module is already imported (decoding never imports);
        with ``strict=True`` *only* listed classes are rebuilt.
    """

    name = "json"

    def __init__(self, types: Iterable[type] = (), *, strict: bool = False) -> None:
        self._types: dict[str, type] = {_qualified(t): t for t in types}
        self._strict = strict

    def register(self, *types: type) -> None:
        """Allow more classes to be rebuilt on load."""
        for t in types:
            self._types[_qualified(t)] = t

    # -- encode -----------------------------------------------------------------------------

    def dumps(self, obj: Any) -> bytes:
        return json.dumps(self._encode(obj), separators=(",", ":"), allow_nan=True).encode()

    def _encode(self, obj: Any) -> Any:
        # Exact-type checks first: this runs for every value of every checkpoint.
        kind = type(obj)
        if kind in _JSON_SCALARS:
            return obj
        if kind is list:
            return [self._encode(v) for v in obj]
        if kind is dict and _TAG not in obj:
            for key in obj:
                if type(key) is not str:
                    break
            else:
                return {k: self._encode(v) for k, v in obj.items()}
        return self._encode_other(obj)

    def _encode_other(self, obj: Any) -> Any:
        if obj is None or isinstance(obj, bool | int | str):
            return obj
        if isinstance(obj, float):
            return obj
        if isinstance(obj, list):
            return [self._encode(v) for v in obj]
        if isinstance(obj, dict):
            if all(type(k) is str for k in obj) and _TAG not in obj:
                return {k: self._encode(v) for k, v in obj.items()}
            return {_TAG: "dict", "v": [[self._encode(k), self._encode(v)] for k, v in obj.items()]}
        if isinstance(obj, BaseModel):
            cls = type(obj)
            data = {k: getattr(obj, k) for k in cls.model_fields}
            return {_TAG: "model", "c": _qualified(cls), "v": self._encode(data)}
        if isinstance(obj, enum.Enum):
            return {_TAG: "enum", "c": _qualified(type(obj)), "v": self._encode(obj.value)}
        if isinstance(obj, tuple):
            return {_TAG: "tuple", "v": [self._encode(v) for v in obj]}
        if isinstance(obj, frozenset):
            return {_TAG: "frozenset", "v": [self._encode(v) for v in obj]}
        if isinstance(obj, set):
            return {_TAG: "set", "v": [self._encode(v) for v in obj]}
        if isinstance(obj, bytes | bytearray):
            return {_TAG: "bytes", "v": base64.b64encode(bytes(obj)).decode()}
        if isinstance(obj, _dt.datetime):
            return {_TAG: "datetime", "v": obj.isoformat()}
        if isinstance(obj, _dt.date):
            return {_TAG: "date", "v": obj.isoformat()}
        if isinstance(obj, _dt.time):
            return {_TAG: "time", "v": obj.isoformat()}
        if isinstance(obj, _dt.timedelta):
            # Exact parts: total_seconds() as a float loses microseconds past ~285 years.
            return {_TAG: "timedelta", "v": [obj.days, obj.seconds, obj.microseconds]}
        if isinstance(obj, decimal.Decimal):
            return {_TAG: "decimal", "v": str(obj)}
        if isinstance(obj, uuid.UUID):
            return {_TAG: "uuid", "v": str(obj)}
        msg = (
            f"JsonSerializer cannot store a {type(obj).__qualname__} ({obj!r:.60}); return plain "
            "data or a pydantic model from durable steps and state fields, or opt in to pickle "
            "with `serializer='pickle'` for a store you trust."
        )
        raise TypeError(msg)

    # -- decode -----------------------------------------------------------------------------

    def loads(self, data: bytes) -> Any:
        # The decoder calls the hook on each JSON object as it is built, innermost first, so
        # untagged data is never walked again in Python (a 10,000-message history decodes
        # at the speed of ``json`` itself).
        try:
            if _TAG_BYTES not in data:  # no tagged value anywhere: nothing to rebuild
                return json.loads(data)
            return json.loads(data, object_hook=self._decode_object)
        except (ValueError, UnicodeDecodeError) as exc:
            if isinstance(exc, CheckpointDecodeError):
                raise
            msg = f"stored data is not valid JSON ({exc})."
            raise CheckpointDecodeError(msg) from exc

    def _decode_object(self, obj: dict[str, Any]) -> Any:
        """Rebuild one tagged object; its contents are already decoded."""
        tag = obj.get(_TAG)
        if tag is None:
            return obj
        value: Any = obj.get("v")
        try:
            match tag:
                case "dict":
                    return {self._decode_key(k): v for k, v in value}
                case "tuple":
                    return tuple(value)
                case "set":
                    return set(value)
                case "frozenset":
                    return frozenset(value)
                case "bytes":
                    return base64.b64decode(value)
                case "datetime":
                    return _dt.datetime.fromisoformat(value)
                case "date":
                    return _dt.date.fromisoformat(value)
                case "time":
                    return _dt.time.fromisoformat(value)
                case "timedelta":
                    if isinstance(value, list):
                        days, seconds, micros = value
                        return _dt.timedelta(days=days, seconds=seconds, microseconds=micros)
                    return _dt.timedelta(seconds=value)  # written by 0.1.0: float seconds
                case "decimal":
                    return decimal.Decimal(value)
                case "uuid":
                    return uuid.UUID(value)
                case "model":
                    cls = self._find(obj["c"], BaseModel)
                    return cls.model_validate(value)
                case "enum":
                    cls = self._find(obj["c"], enum.Enum)
                    return cls(value)
        except CheckpointDecodeError:
            raise
        except Exception as exc:
            msg = f"cannot decode stored {tag!r} value {value!r:.80}: {exc}"
            raise CheckpointDecodeError(msg) from exc
        msg = f"stored value has unknown type tag {tag!r}; it was written by a newer release?"
        raise CheckpointDecodeError(msg)

    @staticmethod
    def _decode_key(key: Any) -> Any:
        return tuple(key) if isinstance(key, list) else key

    def _find(self, qualified: str, base: type) -> Any:
        cls = self._types.get(qualified)
        if cls is None and not self._strict:
            module_name, _, qualname = qualified.partition(":")
            module = sys.modules.get(module_name)  # never import: data must not choose code
            found: Any = module
            for part in qualname.split("."):
                found = getattr(found, part, None) if found is not None else None
            if isinstance(found, type) and issubclass(found, base):
                cls = found
        if cls is None:
            msg = (
                f"stored data names class {qualified!r}, which is not registered with the "
                "serializer; import its module before resuming, or register it with "
                "`JsonSerializer(types=[...])`."
            )
            raise CheckpointDecodeError(msg)
        return cls


class PickleSerializer:
    """Round-trips any picklable object. Loading runs code: use only with trusted stores."""

    name = "pickle"

    def dumps(self, obj: Any) -> bytes:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    def loads(self, data: bytes) -> Any:
        try:
            return pickle.loads(data)
        except Exception as exc:
            msg = f"stored pickle cannot be loaded: {type(exc).__name__}: {exc}"
            raise CheckpointDecodeError(msg) from exc


def resolve_serializer(serializer: Serializer | str | None) -> Serializer:
    """``None``/``"json"`` → :class:`JsonSerializer`; ``"pickle"`` → :class:`PickleSerializer`."""
    if serializer is None or serializer == "json":
        return JsonSerializer()
    if serializer == "pickle":
        return PickleSerializer()
    if isinstance(serializer, str):
        msg = f"unknown serializer {serializer!r}; use 'json', 'pickle' or a Serializer object."
        raise ValueError(msg)
    if not isinstance(serializer, Serializer):
        msg = f"serializer must have dumps(obj) -> bytes and loads(bytes), got {serializer!r}."
        raise TypeError(msg)
    return serializer
