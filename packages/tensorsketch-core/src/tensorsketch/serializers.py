"""The serializer seam: how durable values become bytes.

:class:`JsonSerializer` is the default and is safe to load from a store an attacker can write
to: it decodes to plain data, and rebuilds a pydantic model only for a class that is
registered with it or already imported in this process — it never imports a module or runs
code chosen by the data. :class:`PickleSerializer` round-trips any object but executes code on
load; use it only for stores you trust, by asking for it explicitly (``serializer="pickle"``).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import decimal
import enum
import json
import pickle
import sys
import uuid
from collections.abc import Iterable
from types import ModuleType
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


def _kind_of(cls: Any) -> str | None:
    """Which rebuildable kind ``cls`` is, looking only at the class itself (runs no code)."""
    if not isinstance(cls, type):
        return None
    mro = cls.__mro__
    if BaseModel in mro:
        return "model"
    if enum.Enum in mro:
        return "enum"
    if any("__dataclass_fields__" in vars(base) for base in mro):
        return "dataclass"
    return None


def _validation_keys(cls: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """(attribute, stored key) per field: the key ``model_validate`` accepts, so a model whose
    fields have aliases (and no ``populate_by_name``) validates back."""
    by_alias = cls.model_config.get("validate_by_alias", True) is not False
    pairs = []
    for name, field in cls.model_fields.items():
        alias = field.validation_alias if field.validation_alias is not None else field.alias
        pairs.append((name, alias if by_alias and isinstance(alias, str) else name))
    return tuple(pairs)


def _static_lookup(namespace: Any, name: str) -> Any:
    """``namespace.name`` from its ``__dict__`` only: a module ``__getattr__`` could import."""
    if not isinstance(namespace, ModuleType | type):
        return None
    return vars(namespace).get(name)


class JsonSerializer:
    """JSON with tagged types: tuples, sets, bytes, datetimes, UUIDs, Decimals, enums,
    dataclasses and pydantic models.

    :param types: dataclasses / pydantic models / enums to rebuild by name. Without the list, a
        tagged class is rebuilt only if its module is already imported (decoding never
        imports); with ``strict=True`` *only* listed classes are rebuilt.
    """

    name = "json"

    def __init__(self, types: Iterable[type] = (), *, strict: bool = False) -> None:
        self._types: dict[str, type] = {}
        self._strict = strict
        # Per dataclass: its field names, and whether its tag can be found again on load.
        self._dc_fields: dict[type, tuple[str, ...]] = {}
        self._model_keys: dict[type, tuple[tuple[str, str], ...]] = {}
        self._findable: dict[type, bool] = {}
        self.register(*types)

    def register(self, *types: type) -> None:
        """Allow more classes to be rebuilt on load (needed for classes defined in a function)."""
        for t in types:
            if _kind_of(t) is None:
                msg = (
                    f"JsonSerializer can only register dataclasses, pydantic models and enums, "
                    f"got {t!r}."
                )
                raise TypeError(msg)
            self._types[_qualified(t)] = t
        self._findable.clear()

    # -- encode -----------------------------------------------------------------------------

    def dumps(self, obj: Any) -> bytes:
        try:
            return json.dumps(self._encode(obj), separators=(",", ":"), allow_nan=True).encode()
        except RecursionError:
            msg = "JsonSerializer cannot store a value nested this deeply; flatten it."
            raise ValueError(msg) from None

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
        # Enums first: an IntEnum / StrEnum member is also an int / str.
        if isinstance(obj, enum.Enum):
            cls: type = type(obj)
            return {_TAG: "enum", "c": self._tag_of(cls), "v": self._encode(obj.value)}
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
            keys = self._model_keys.get(cls)
            if keys is None:
                keys = self._model_keys[cls] = _validation_keys(cls)
            data = {key: getattr(obj, name) for name, key in keys}
            if obj.__pydantic_extra__:
                data.update(obj.__pydantic_extra__)
            return {_TAG: "model", "c": self._tag_of(cls), "v": self._encode(data)}
        if hasattr(type(obj), "__dataclass_fields__") and not isinstance(obj, type):
            cls = type(obj)
            names = self._dc_fields.get(cls)
            if names is None:
                names = self._dc_fields[cls] = tuple(f.name for f in dataclasses.fields(obj))
            fields = {n: getattr(obj, n) for n in names}
            return {_TAG: "dataclass", "c": self._tag_of(cls), "v": self._encode(fields)}
        if isinstance(obj, tuple):
            return {_TAG: "tuple", "v": [self._encode(v) for v in obj]}
        if isinstance(obj, frozenset):
            return {_TAG: "frozenset", "v": [self._encode(v) for v in obj]}
        if isinstance(obj, set):
            return {_TAG: "set", "v": [self._encode(v) for v in obj]}
        if isinstance(obj, bytes | bytearray):
            return {_TAG: "bytes", "v": base64.b64encode(bytes(obj)).decode()}
        if isinstance(obj, _dt.datetime | _dt.time):
            tag = "datetime" if isinstance(obj, _dt.datetime) else "time"
            if obj.fold:  # the second of two repeated wall-clock times; isoformat drops it
                return {_TAG: tag, "v": obj.isoformat(), "f": 1}
            return {_TAG: tag, "v": obj.isoformat()}
        if isinstance(obj, _dt.date):
            return {_TAG: "date", "v": obj.isoformat()}
        if isinstance(obj, _dt.timedelta):
            # Exact parts: total_seconds() as a float loses microseconds past ~285 years.
            return {_TAG: "timedelta", "v": [obj.days, obj.seconds, obj.microseconds]}
        if isinstance(obj, decimal.Decimal):
            return {_TAG: "decimal", "v": str(obj)}
        if isinstance(obj, uuid.UUID):
            return {_TAG: "uuid", "v": str(obj)}
        msg = (
            f"JsonSerializer cannot store a {type(obj).__qualname__} ({obj!r:.60}); return plain "
            "data, a dataclass or a pydantic model from durable steps and state fields, or opt "
            "in to pickle with `serializer='pickle'` for a store you trust."
        )
        raise TypeError(msg)

    def _tag_of(self, cls: type) -> str:
        """The class's tag, refusing (at write time, not on resume) one a load cannot find."""
        tag = _qualified(cls)
        findable = self._findable.get(cls)
        if findable is None:
            findable = self._findable[cls] = (
                self._types.get(tag) is cls
                if self._strict
                else self._types.get(tag) is cls or self._lookup(tag) is cls
            )
        if not findable:
            why = (
                "strict mode rebuilds only registered classes"
                if self._strict
                else ("define it at module level")
            )
            msg = (
                f"JsonSerializer cannot store a {cls.__qualname__}: a load could not find the "
                f"class again by its name {tag!r} ({why}); or register it with "
                "`JsonSerializer(types=[...])`."
            )
            raise TypeError(msg)
        return tag

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
        except RecursionError:
            # The decoder refuses nesting deeper than the recursion limit; say so as data.
            msg = "stored data is nested too deeply to decode (corrupt or hostile)."
            raise CheckpointDecodeError(msg) from None

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
                    return _dt.datetime.fromisoformat(value).replace(fold=obj.get("f", 0))
                case "date":
                    return _dt.date.fromisoformat(value)
                case "time":
                    return _dt.time.fromisoformat(value).replace(fold=obj.get("f", 0))
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
                    return self._find(obj.get("c"), "model").model_validate(value)
                case "enum":
                    return self._find(obj.get("c"), "enum")(value)
                case "dataclass":
                    return self._rebuild_dataclass(self._find(obj.get("c"), "dataclass"), value)
        except CheckpointDecodeError:
            raise
        except Exception as exc:
            msg = f"cannot decode stored {tag!r:.80} value {value!r:.80}: {exc}"
            raise CheckpointDecodeError(msg) from exc
        msg = (
            f"stored value has unknown type tag {tag!r:.80}, likely written by a newer "
            "release: upgrade tensorsketch-core to read it."
        )
        raise CheckpointDecodeError(msg)

    @staticmethod
    def _decode_key(key: Any) -> Any:
        return tuple(key) if isinstance(key, list) else key

    def _rebuild_dataclass(self, cls: type, value: Any) -> Any:
        """Set the stored fields on a bare instance: no ``__init__``/``__post_init__`` runs,
        and only the class's own fields can be set (never ``__class__`` or a method)."""
        if not isinstance(value, dict):
            msg = f"stored dataclass {_qualified(cls)!r} has no field mapping"
            raise CheckpointDecodeError(msg)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = value.keys() - fields.keys()
        if unknown:
            msg = (
                f"stored dataclass {_qualified(cls)!r} has fields {sorted(unknown)!r:.200} that "
                "the class does not declare"
            )
            raise CheckpointDecodeError(msg)
        instance: Any = object.__new__(cls)
        for name, field in fields.items():
            if name in value:
                item = value[name]
            elif field.default is not dataclasses.MISSING:  # a field added since it was stored
                item = field.default
            elif field.default_factory is not dataclasses.MISSING:
                item = field.default_factory()
            else:
                msg = f"stored dataclass {_qualified(cls)!r} lacks its field {name!r}"
                raise CheckpointDecodeError(msg)
            object.__setattr__(instance, name, item)  # also past a frozen dataclass's guard
        return instance

    def _lookup(self, qualified: str) -> Any:
        """Find ``module:Qual.Name`` among imported modules without importing or running code."""
        module_name, _, qualname = qualified.partition(":")
        found: Any = sys.modules.get(module_name)  # never import: data must not choose code
        for part in qualname.split("."):
            found = _static_lookup(found, part)
        return found

    def _find(self, qualified: Any, kind: str) -> Any:
        cls: Any = self._types.get(qualified) if isinstance(qualified, str) else None
        if cls is None and not self._strict and isinstance(qualified, str):
            cls = self._lookup(qualified)
        if cls is None:
            msg = (
                f"stored data names class {qualified!r:.200}, which is not registered with the "
                "serializer; import its module before resuming, or register it with "
                "`JsonSerializer(types=[...])`."
            )
            raise CheckpointDecodeError(msg)
        actual = _kind_of(cls)
        if actual != kind:
            what = f"a {actual}" if actual else "not a dataclass, pydantic model or enum"
            msg = f"stored data names {qualified!r:.200} as a {kind}, but it is {what}; refused."
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
