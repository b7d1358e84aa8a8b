"""The serializer seam: how durable values become bytes.

:class:`MsgpackSerializer` is the default and is safe to load from a store an attacker can
write to: it decodes to plain data, and rebuilds a pydantic model only for a class that is
registered with it or already imported in this process — it never imports a module or runs
code chosen by the data. :class:`JsonSerializer` (``serializer="json"``) writes the same values
under the same rules as JSON text; each reads the other's payloads.
:class:`PickleSerializer` round-trips any object but executes code on load; use it only for
stores you trust, by asking for it explicitly (``serializer="pickle"``).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as _dt
import decimal
import enum
import json
import pickle
import struct
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel
from pydantic_core import from_json

from tensorsketch.errors import CheckpointDecodeError

__all__ = [
    "JsonSerializer",
    "MsgpackSerializer",
    "PickleSerializer",
    "Serializer",
    "UnstorableValueError",
    "refused_field",
    "resolve_serializer",
    "shared_encoding",
]


class UnstorableValueError(TypeError):
    """A value the serializer cannot write (a lock, a socket, a class a load could not find).

    The serializer sees only the value; the runtime, which knows the state field and the node
    that wrote it, says those in the message it raises (still this type)."""


_TAG = "$t"
# How a tag key appears in encoded bytes (a string equal to it elsewhere would be escaped
# no differently, so its absence proves there is no tag; its presence just takes the hook).
_TAG_BYTES = json.dumps(_TAG).encode()
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
#: The containers that, empty, encode as themselves (a tuple is tagged even when empty).
_PLAIN_CONTAINERS = frozenset({list, dict})
#: Modules of ours that were renamed: a tag written under the old name (``module:Qualname``)
#: is looked up under the new one, so data stored before the rename still decodes. A fixed
#: table: the data still chooses no module.
_RENAMED_MODULES = {
    "tensorsketch.chat": "tensorsketch.provider",
    "tensorsketch.structure": "tensorsketch.graph_structure",
    "tensorsketch.node_replay": "tensorsketch.pregel.replay",
}

#: The first byte of a msgpack payload: one msgpack never uses (0xc1) and that no UTF-8 text, so
#: no JSON payload, starts with. Every tagged serializer reads both formats by it.
MSGPACK_MAGIC = b"\xc1"
#: The msgpack extension type of a tagged value (its bytes: the tag mapping, packed).
_EXT_TAGGED = 1
#: Tagged values inside tagged values a msgpack payload may nest (a model in a tuple in a
#: model is 3); each level is a Python call, so the limit stays far below the interpreter's.
_MAX_TAG_DEPTH = 200


class _Tagged(dict[str, Any]):
    """A tagged value in an encoded tree: a plain mapping to JSON, an extension to msgpack."""

    __slots__ = ()


class _SharedTagged(_Tagged):
    """The tagged tree of a model or dataclass instance inside :func:`shared_encoding`, which
    every ``dumps`` of the block reuses: it keeps the msgpack extension it was packed into
    (``None`` until then) and the depth that happened at, so it is packed once, too."""

    __slots__ = ("depth", "ext")

    ext: Any
    depth: int


#: Inside :func:`shared_encoding`: its serializer, the encoded tree of every model and
#: dataclass instance the walk met, and the packed extension of every one msgpack's native
#: walk met (instance, extension, depth, tag count), both by ``id`` (an entry keeps the
#: instance alive, so no other object takes its id while the block lasts).
_SHARED: ContextVar[
    tuple[Any, dict[int, tuple[Any, Any]], dict[int, tuple[Any, Any, int, int]]] | None
] = ContextVar("tensorsketch_shared_encoding", default=None)


@contextlib.contextmanager
def shared_encoding(serializer: Any) -> Iterator[None]:
    """Encode each model or dataclass instance once for every ``dumps`` of ``serializer``
    in the block: a checkpoint and the stream events committed with it (``node_end``,
    ``values``, ``run_end``) carry the same messages, which were encoded and packed up to
    four times. The block must not change a value it encodes (its first encoding is reused,
    bytes and all). A block inside one of the same serializer shares the outer one's
    encodings (the events encoded inside a checkpoint's block reuse the checkpoint's, not
    only each other's)."""
    outer = _SHARED.get()
    if outer is not None and outer[0] is serializer:
        yield
        return
    token = _SHARED.set((serializer, {}, {}))
    try:
        yield
    finally:
        _SHARED.reset(token)


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


def _plain_field_names(cls: type, keys: tuple[tuple[str, str], ...]) -> tuple[str, ...] | None:
    """The field names, if an instance's ``__dict__`` holding exactly them (in order) is its
    stored data as it is: every field stored under its own name, and none read through a
    class attribute (a descriptor) or a custom ``__getattribute__`` instead of the dict."""
    if cls.__getattribute__ is not object.__getattribute__:  # type: ignore[comparison-overlap]
        return None
    for name, key in keys:
        if name != key or any(name in vars(base) for base in cls.__mro__):
            return None
    return tuple(name for name, _ in keys)


def _static_lookup(namespace: Any, name: str) -> Any:
    """``namespace.name`` from its ``__dict__`` only: a module ``__getattr__`` could import."""
    if not isinstance(namespace, ModuleType | type):
        return None
    return vars(namespace).get(name)


# -- the tagged built-in types: encoders, by exact type and in isinstance order -------------
# Each takes the serializer's ``_encode`` (for the items of a container) and the value.


def _encode_frozenset(encode: Callable[[Any], Any], obj: frozenset[Any]) -> Any:
    return _Tagged({_TAG: "frozenset", "v": [encode(v) for v in obj]})


def _encode_set(encode: Callable[[Any], Any], obj: set[Any]) -> Any:
    return _Tagged({_TAG: "set", "v": [encode(v) for v in obj]})


def _encode_bytes(encode: Callable[[Any], Any], obj: bytes | bytearray) -> Any:
    return _Tagged({_TAG: "bytes", "v": base64.b64encode(bytes(obj)).decode()})


def _encode_clock(encode: Callable[[Any], Any], obj: _dt.datetime | _dt.time) -> Any:
    tag = "datetime" if isinstance(obj, _dt.datetime) else "time"
    out = _Tagged({_TAG: tag, "v": obj.isoformat()})
    offset = obj.utcoffset()
    if offset is not None and offset.microseconds:
        # CPython 3.11's fromisoformat drops an offset's microseconds: store it apart.
        out["v"] = obj.replace(tzinfo=None).isoformat()
        out["o"] = [offset.days, offset.seconds, offset.microseconds]
    if obj.fold:  # the second of two repeated wall-clock times; isoformat drops it
        out["f"] = 1
    return out


def _encode_date(encode: Callable[[Any], Any], obj: _dt.date) -> Any:
    return _Tagged({_TAG: "date", "v": obj.isoformat()})


def _encode_timedelta(encode: Callable[[Any], Any], obj: _dt.timedelta) -> Any:
    # Exact parts: total_seconds() as a float loses microseconds past ~285 years.
    return _Tagged({_TAG: "timedelta", "v": [obj.days, obj.seconds, obj.microseconds]})


def _encode_decimal(encode: Callable[[Any], Any], obj: decimal.Decimal) -> Any:
    return _Tagged({_TAG: "decimal", "v": str(obj)})


def _encode_uuid(encode: Callable[[Any], Any], obj: uuid.UUID) -> Any:
    return _Tagged({_TAG: "uuid", "v": str(obj)})


_Encoder = Callable[[Callable[[Any], Any], Any], Any]
# In isinstance order, for subclasses: a datetime is also a date, so it comes first. (Tuples,
# before all of these, are encoded inline.)
_TAGGED: tuple[tuple[tuple[type, ...], _Encoder], ...] = (
    ((frozenset,), _encode_frozenset),
    ((set,), _encode_set),
    ((bytes, bytearray), _encode_bytes),
    ((_dt.datetime, _dt.time), _encode_clock),
    ((_dt.date,), _encode_date),
    ((_dt.timedelta,), _encode_timedelta),
    ((decimal.Decimal,), _encode_decimal),
    ((uuid.UUID,), _encode_uuid),
)
# The same by exact type: one lookup instead of the ordered scan, for the common case.
_TAGGED_BY_TYPE: dict[type, _Encoder] = {kind: enc for kinds, enc in _TAGGED for kind in kinds}


def _subclass_encoder(obj: Any) -> _Encoder | None:
    """For a subclass of a tagged built-in: the first family in order that claims it."""
    for kinds, encoder in _TAGGED:
        if isinstance(obj, kinds):
            return encoder
    return None


# -- the tagged built-in types: decoders (fixed constructors; the data picks none) --------------


def _decode_dict(pairs: Any) -> dict[Any, Any]:
    """A dict with non-string keys, stored as pairs; a list key was a tuple."""
    return {(tuple(k) if isinstance(k, list) else k): v for k, v in pairs}


def _decode_timedelta(value: Any) -> _dt.timedelta:
    if isinstance(value, list):
        days, seconds, micros = value
        return _dt.timedelta(days=days, seconds=seconds, microseconds=micros)
    return _dt.timedelta(seconds=value)  # written by 0.1.0: float seconds


# Tags whose value alone rebuilds them.
_DATA_DECODERS: dict[str, Callable[[Any], Any]] = {
    "dict": _decode_dict,
    "tuple": tuple,
    "set": set,
    "frozenset": frozenset,
    "bytes": base64.b64decode,
    "date": _dt.date.fromisoformat,
    "timedelta": _decode_timedelta,
    "decimal": decimal.Decimal,
    "uuid": uuid.UUID,
}
# Wall-clock tags, which also carry ``fold`` ("f") beside the value.
_CLOCK_DECODERS: dict[str, Callable[[str], _dt.datetime | _dt.time]] = {
    "datetime": _dt.datetime.fromisoformat,
    "time": _dt.time.fromisoformat,
}
# Tags naming a class that must be found (registered or imported), never imported.
_CLASS_TAGS = frozenset({"model", "enum", "dataclass"})


class _TaggedSerializer:
    """What the JSON and msgpack serializers share: the type tags, the rules for rebuilding a
    tagged class, and reading either format (by its first byte), so a store can switch
    between them at any time."""

    name = "tagged"

    def __init__(self, types: Iterable[type] = (), *, strict: bool = False) -> None:
        self._types: dict[str, type] = {}
        self._strict = strict
        # Per dataclass: its field names, and whether its tag can be found again on load.
        self._dc_fields: dict[type, tuple[str, ...]] = {}
        self._model_keys: dict[type, tuple[tuple[str, str], ...]] = {}
        # Per model class: its field names when its ``__dict__`` can stand for its data.
        self._model_names: dict[type, tuple[str, ...] | None] = {}
        self._findable: dict[type, bool] = {}
        self._tags: dict[type, str] = {}  # the tag of each findable class met
        self.register(*types)

    def register(self, *types: type) -> None:
        """Allow more classes to be rebuilt on load (needed for classes defined in a function)."""
        for t in types:
            if _kind_of(t) is None:
                msg = (
                    f"{type(self).__name__} can only register dataclasses, pydantic models and "
                    f"enums, got {t!r}."
                )
                raise TypeError(msg)
            self._types[_qualified(t)] = t
        self._findable.clear()
        self._tags.clear()

    # -- encode -----------------------------------------------------------------------------

    def dumps(self, obj: Any) -> bytes:
        raise NotImplementedError

    def _tree(self, obj: Any) -> Any:
        """``obj`` as plain data with tagged values, ready for either format."""
        try:
            return self._encode(obj)
        except RecursionError:
            raise self._too_deep() from None

    def _too_deep(self) -> ValueError:
        msg = f"{type(self).__name__} cannot store a value nested this deeply; flatten it."
        return ValueError(msg)

    def _encode(self, obj: Any) -> Any:
        # Exact-type checks first: this runs for every value of every checkpoint.
        # A container's scalar items are taken inline: no call for each (a run record is
        # some forty fields, most of them strings, numbers and None).
        # So is an empty list or dict (it encodes as itself: a record holds half a dozen).
        kind = type(obj)
        if kind in _JSON_SCALARS:
            return obj
        scalars, empty, encode = _JSON_SCALARS, _PLAIN_CONTAINERS, self._encode
        if kind is list:
            if not obj:
                return []
            return [
                v if type(v) in scalars or (type(v) in empty and not v) else encode(v) for v in obj
            ]
        if kind is dict and _TAG not in obj:
            if not obj:
                return {}
            for key in obj:
                if type(key) is not str:
                    break
            else:
                return {
                    k: v if type(v) in scalars or (type(v) in empty and not v) else encode(v)
                    for k, v in obj.items()
                }
        if kind in self._model_keys:  # a model class met before: none of the checks below
            return self._encode_model(obj)
        if kind is tuple:  # what the checks below come to for one (a record holds several)
            return _Tagged(
                {
                    _TAG: "tuple",
                    "v": [
                        v if type(v) in scalars or (type(v) in empty and not v) else encode(v)
                        for v in obj
                    ],
                }
            )
        return self._encode_other(obj)

    def _encode_other(self, obj: Any) -> Any:
        """Everything ``_encode`` does not take by exact type, checked with ``isinstance`` in an
        order that matters for subclasses: the first family that claims a value wins."""
        # Enums first: an IntEnum / StrEnum member is also an int / str.
        if isinstance(obj, enum.Enum):
            cls: type = type(obj)
            return _Tagged({_TAG: "enum", "c": self._tag_of(cls), "v": self._encode(obj.value)})
        if obj is None or isinstance(obj, bool | int | str):
            return obj
        if isinstance(obj, float):
            return obj
        if isinstance(obj, list):
            return [self._encode(v) for v in obj]
        if isinstance(obj, dict):
            if all(type(k) is str for k in obj) and _TAG not in obj:
                return {k: self._encode(v) for k, v in obj.items()}
            return _Tagged(
                {_TAG: "dict", "v": [[self._encode(k), self._encode(v)] for k, v in obj.items()]}
            )
        if isinstance(obj, BaseModel):
            return self._encode_model(obj)
        if hasattr(type(obj), "__dataclass_fields__") and not isinstance(obj, type):
            return self._encode_dataclass(obj)
        if isinstance(obj, tuple):  # the commonest tagged type: no table, no extra call
            return _Tagged({_TAG: "tuple", "v": [self._encode(v) for v in obj]})
        encoder = _TAGGED_BY_TYPE.get(type(obj)) or _subclass_encoder(obj)
        if encoder is None:
            msg = (
                f"{type(self).__name__} cannot store a value of type {type(obj).__qualname__!r} "
                f"({obj!r:.60}); return plain data, a dataclass or a pydantic model from durable "
                "steps and state fields, or opt in to pickle with `serializer='pickle'` for a "
                "store you trust."
            )
            raise UnstorableValueError(msg)
        return encoder(self._encode, obj)

    def _encode_model(self, obj: BaseModel) -> Any:
        """A model's fields under the keys ``model_validate`` accepts, and its extras."""
        shared = _SHARED.get()
        if shared is not None and shared[0] is self:
            seen = shared[1].get(id(obj))
            if seen is not None:
                return seen[1]
        cls = type(obj)
        tagged = {_TAG: "model", "c": self._tag_of(cls), "v": self._encode(self._model_data(obj))}
        if shared is not None and shared[0] is self:
            tree = _SharedTagged(tagged)
            tree.ext, tree.depth = None, 0
            shared[1][id(obj)] = (obj, tree)
            return tree
        return _Tagged(tagged)

    def _encode_dataclass(self, obj: Any) -> Any:
        """A dataclass instance's fields by name (its field list is cached per class)."""
        shared = _SHARED.get()
        if shared is not None and shared[0] is self:
            seen = shared[1].get(id(obj))
            if seen is not None:
                return seen[1]
        cls = type(obj)
        tagged = {_TAG: "dataclass", "c": self._tag_of(cls), "v": self._encode(self._dc_data(obj))}
        if shared is not None and shared[0] is self:
            tree = _SharedTagged(tagged)
            tree.ext, tree.depth = None, 0
            shared[1][id(obj)] = (obj, tree)
            return tree
        return _Tagged(tagged)

    def _model_data(self, obj: BaseModel) -> dict[str, Any]:
        """A model's fields under the keys ``model_validate`` accepts, and its extras. Not to
        be changed: it may be the instance's own ``__dict__`` (when that holds exactly the
        fields, in order, under their stored keys: the common model, with no copy made)."""
        cls = type(obj)
        keys = self._model_keys.get(cls)
        if keys is None:
            keys = _validation_keys(cls)
            self._model_names[cls] = _plain_field_names(cls, keys)  # first: read once keyed
            self._model_keys[cls] = keys
        own = obj.__dict__
        data = own if tuple(own) == self._model_names.get(cls) else None
        if data is None:
            data = {key: getattr(obj, name) for name, key in keys}
        extra = obj.__pydantic_extra__
        if extra:
            data = {**data, **extra}
        return data

    def _dc_data(self, obj: Any) -> dict[str, Any]:
        """A dataclass instance's fields by name (its field list is cached per class)."""
        cls = type(obj)
        names = self._dc_fields.get(cls)
        if names is None:
            names = self._dc_fields[cls] = tuple(f.name for f in dataclasses.fields(obj))
        return {n: getattr(obj, n) for n in names}

    def _tag_of(self, cls: type) -> str:
        """The class's tag, refusing (at write time, not on resume) one a load cannot find."""
        tag = self._tags.get(cls)  # found before: its tag, made once
        if tag is not None:
            return tag
        tag = _qualified(cls)
        findable = self._findable.get(cls)
        if findable is None:
            findable = self._findable[cls] = (
                self._types.get(tag) is cls
                if self._strict
                else self._types.get(tag) is cls or self._lookup(tag) is cls
            )
        if findable:
            self._tags[cls] = tag
        else:
            why = (
                "strict mode rebuilds only registered classes"
                if self._strict
                else ("define it at module level")
            )
            msg = (
                f"{type(self).__name__} cannot store an instance of {cls.__qualname__}: a load "
                f"could not find the class again by its name {tag!r} ({why}); or register it "
                f"with `{type(self).__name__}(types=[...])`."
            )
            raise UnstorableValueError(msg)
        return tag

    # -- decode -----------------------------------------------------------------------------

    def loads(self, data: bytes) -> Any:
        if data[:1] == MSGPACK_MAGIC:
            return self._load_msgpack(data)
        return self._load_json(data)

    def _load_json(self, data: bytes) -> Any:
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

    def loads_many(self, datas: Iterable[bytes]) -> list[Any]:
        """:meth:`loads` of each payload (a checkpoint's chain: ~16 rows per read), with the
        per-call setup done once: one extension hook for the msgpack rows, and pydantic-core's
        JSON parser (the objects ``json.loads`` builds, in about half the time on
        string-heavy data) for JSON rows with no tag. Raises as :meth:`loads` does at the
        first payload that fails."""
        errors: list[BaseException] = []
        tagged: Callable[[int, bytes], Any] | None = None
        out: list[Any] = []
        for data in datas:
            if data[:1] == MSGPACK_MAGIC:
                if tagged is None:
                    tagged = self._ext_hook(_ormsgpack("read a msgpack payload"), errors)
                out.append(self._load_msgpack(data, tagged, errors))
            elif b"$" not in data or _TAG_BYTES not in data:  # memchr first: no tag at all
                try:
                    out.append(from_json(data, cache_strings="keys"))
                except ValueError:  # what it refuses (a lone surrogate escape) json reads
                    out.append(self._load_json(data))
            else:
                out.append(self._load_json(data))
        return out

    def _ext_hook(self, ormsgpack: Any, errors: list[BaseException]) -> Callable[[int, bytes], Any]:
        """The decoder's hook for tagged values (extensions), innermost first. The decoder
        reports a failing hook only as "ext_hook failed", so the hook keeps, in ``errors``,
        the error that says what was wrong."""
        return _TagHook(self, ormsgpack, errors)

    def _load_msgpack(
        self,
        data: bytes,
        tagged: Callable[[int, bytes], Any] | None = None,
        errors: list[BaseException] | None = None,
    ) -> Any:
        # As with JSON's hook, the decoder calls Python only for tagged values (extensions).
        ormsgpack = _ormsgpack("read a msgpack payload")
        if tagged is None or errors is None:
            errors = []
            tagged = self._ext_hook(ormsgpack, errors)
        try:
            return ormsgpack.unpackb(memoryview(data)[1:], ext_hook=tagged)
        except ValueError as exc:
            cause = errors[0] if errors else None
            errors.clear()
            if isinstance(cause, CheckpointDecodeError):
                raise cause from None
            if isinstance(cause, RecursionError) or "Recursion limit" in str(exc):
                msg = "stored data is nested too deeply to decode (corrupt or hostile)."
                raise CheckpointDecodeError(msg) from None
            if cause is not None and not isinstance(cause, Exception):
                raise cause from None  # KeyboardInterrupt and the like, as they came
            msg = f"stored data is not valid msgpack ({cause or exc})."
            raise CheckpointDecodeError(msg) from exc

    def _decode_object(self, obj: dict[str, Any]) -> Any:
        """Rebuild one tagged object; its contents are already decoded."""
        tag = obj.get(_TAG)
        if tag is None:
            return obj
        value: Any = obj.get("v")
        key = tag if isinstance(tag, str) else ""  # a list or dict tag cannot be looked up
        try:
            decode = _DATA_DECODERS.get(key)
            if decode is not None:
                return decode(value)
            clock = _CLOCK_DECODERS.get(key)
            if clock is not None:
                moment = clock(value).replace(fold=obj.get("f", 0))
                if "o" in obj:
                    offset = _dt.timedelta(*obj["o"])
                    return moment.replace(tzinfo=_dt.timezone(offset))
                return moment
            if key in _CLASS_TAGS:
                return self._decode_class(key, obj.get("c"), value)
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

    def _decode_class(self, tag: str, qualified: Any, value: Any) -> Any:
        """A model, enum or dataclass: the class named by the data, found only among
        registered or imported classes of that kind (:meth:`_find`)."""
        cls = self._find(qualified, tag)
        if tag == "model":
            return cls.model_validate(value)
        if tag == "enum":
            return cls(value)
        return self._rebuild_dataclass(cls, value)

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
        module_name = _RENAMED_MODULES.get(module_name, module_name)
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
                f"`{type(self).__name__}(types=[...])`."
            )
            raise CheckpointDecodeError(msg)
        actual = _kind_of(cls)
        if actual != kind:
            what = f"a {actual}" if actual else "not a dataclass, pydantic model or enum"
            msg = f"stored data names {qualified!r:.200} as a {kind}, but it is {what}; refused."
            raise CheckpointDecodeError(msg)
        return cls


class JsonSerializer(_TaggedSerializer):
    """JSON with tagged types: tuples, sets, bytes, datetimes, UUIDs, Decimals, enums,
    dataclasses and pydantic models. Reads what :class:`MsgpackSerializer` writes, too.

    :param types: dataclasses / pydantic models / enums to rebuild by name. Without the list, a
        tagged class is rebuilt only if its module is already imported (decoding never
        imports); with ``strict=True`` *only* listed classes are rebuilt.
    """

    name = "json"

    def dumps(self, obj: Any) -> bytes:
        return _json_bytes(self._tree(obj))


class MsgpackSerializer(_TaggedSerializer):
    """The default: the same values, tags and safety as :class:`JsonSerializer`, written as
    msgpack: about 6x faster to encode than JSON, faster to read back, in slightly fewer
    bytes. Reads JSON payloads too, so a store written with either reads with both.

    A value msgpack cannot hold (an int beyond 64 bits, a string with a lone surrogate,
    tagged values nested more than 200 deep) is written as JSON instead, which both
    serializers read.

    ormsgpack walks the value itself, in C, and calls back into Python only for a value that
    takes a tag; what that walk cannot judge alone is written by the Python walk
    (:meth:`_dumps_walked`), and the bytes are the same either way. One difference: an
    ``ormsgpack.Ext`` inside a value is written as it is (the Python walk refused one).
    """

    name = "msgpack"

    def dumps(self, obj: Any) -> bytes:
        ormsgpack = _ormsgpack("write msgpack")
        packed = self._pack_native(ormsgpack, obj)
        if packed is not None:
            return MSGPACK_MAGIC + packed
        return self._dumps_walked(obj)

    def _pack_native(self, ormsgpack: Any, obj: Any) -> bytes | None:
        """``obj`` packed by ormsgpack's own walk, which calls back into Python only for a
        value that takes a tag (``extend``), or ``None`` where the bytes could differ from
        :meth:`_dumps_walked`'s, which then decides: a dict key that is not a string, a dict
        holding the tag key, an int beyond 64 bits, a lone surrogate, nesting too deep, an
        unstorable value (its error is the walk's), and bytes (tagged by the walk, packed
        as msgpack ``bin`` by ormsgpack: see :meth:`_may_hold_bin`)."""
        option = _native_option(ormsgpack)
        shared = _SHARED.get()
        memo = shared[2] if shared is not None and shared[0] is self else None
        made: dict[int, tuple[Any, Any]] = {}  # outermost extensions, for _may_hold_bin
        depth = 0
        tags = 0  # tag mappings packed into the output (each one writes the tag key once)
        model_keys, model_names = self._model_keys, self._model_names

        def extend(value: Any) -> Any:
            nonlocal depth, tags
            kind = type(value)
            if memo is not None:  # inside shared_encoding: a model or dataclass met before
                seen = memo.get(id(value))
                # One packed before no shallower than here: what it nests stays in the limit.
                if seen is not None and seen[2] >= depth:
                    tags += seen[3]
                    if depth == 0:
                        made[id(value)] = (value, seen[1])
                    return seen[1]
            if kind in model_keys:  # a model class met before: none of the checks below
                own = value.__dict__  # _model_data's commonest case, inline
                if tuple(own) != model_names[kind] or value.__pydantic_extra__:
                    own = self._model_data(value)
                mapping: Any = {_TAG: "model", "c": self._tag_of(kind)}
                mapping["v"] = own
                reusable = True
            else:
                mapping, reusable = self._native_tag(value)
                if type(mapping) is not _Tagged:  # a subclass of a plain type: stored as that
                    return mapping
                mapping = dict(mapping)  # a _Tagged would come back to extend
            depth += 1
            before = tags
            try:
                if depth > _MAX_TAG_DEPTH:  # the reader would refuse it: the walk writes JSON
                    msg = "tagged values nested too deeply for msgpack"
                    raise TypeError(msg)
                ext = ormsgpack.Ext(
                    _EXT_TAGGED, ormsgpack.packb(mapping, default=extend, option=option)
                )
                count = tags - before + 1
                if reusable and memo is not None:
                    memo[id(value)] = (value, ext, depth - 1, count)  # where it was met
                if depth == 1:
                    made[id(value)] = (value, ext)
            finally:
                depth -= 1
            tags = before + count
            return ext

        try:
            packed: bytes = ormsgpack.packb(obj, default=extend, option=option)
        except TypeError:
            return None
        finally:
            # ``extend`` names itself (its own ``default``): a cycle of the function and its
            # cells that only the garbage collector would free, so every dumps fed the
            # collector a dozen objects. Pointing the name elsewhere breaks it.
            extend = _as_is
        if packed.count(_TAG_KEY_PACKED) != tags:  # a dict holds the tag key (or may)
            return None
        if _may_hold_bin(packed) and self._may_hold_bin(ormsgpack, obj, made, option, packed):
            return None
        return packed

    def _native_tag(self, value: Any) -> tuple[Any, bool]:
        """What the native walk writes for ``value``, which it handed to ``extend``: its tag
        mapping (a :class:`_Tagged`, its items as they are: the walk packs them) and whether
        it is a model or dataclass (shared in :func:`shared_encoding`); or, for a subclass of
        ``str``/``int``/``float``/``list``/``dict``, the plain value to write instead. In
        ``_encode`` and ``_encode_other``'s order (it matters for subclasses); raises on what
        they refuse."""
        kind = type(value)
        if kind is tuple:
            return _Tagged({_TAG: "tuple", "v": list(value)}), False
        if isinstance(value, enum.Enum):
            return _Tagged({_TAG: "enum", "c": self._tag_of(kind), "v": value.value}), False
        if isinstance(value, str | int | float):
            for plain in (str, int, float):
                if isinstance(value, plain):
                    return plain(value), False
        if isinstance(value, list):
            return list(value), False
        if isinstance(value, dict):  # ormsgpack refuses a non-str key; tag keys are counted
            return dict(value), False
        if isinstance(value, BaseModel):
            tag = self._tag_of(kind)
            return _Tagged({_TAG: "model", "c": tag, "v": self._model_data(value)}), True
        if hasattr(kind, "__dataclass_fields__") and not isinstance(value, type):
            tag = self._tag_of(kind)
            return _Tagged({_TAG: "dataclass", "c": tag, "v": self._dc_data(value)}), True
        if isinstance(value, tuple):
            return _Tagged({_TAG: "tuple", "v": list(value)}), False
        encoder = _TAGGED_BY_TYPE.get(kind) or _subclass_encoder(value)
        if encoder is None:
            raise TypeError  # unstorable: the walk raises what it says
        return encoder(_as_is, value), False

    def _may_hold_bin(
        self,
        ormsgpack: Any,
        obj: Any,
        made: dict[int, tuple[Any, Any]],
        option: int,
        packed: bytes,
    ) -> bool:
        """Whether a ``bytes``/``bytearray``/``memoryview`` was packed natively (as ``bin``,
        where the walk tags it), after the output ``packed`` holds a byte a ``bin`` header
        starts with. Those bytes are mostly inside a float (a record's or an event row's
        timestamps; while the clock's third byte is ``c4`` to ``c6``, in every one of them), so
        first: when ``packed`` holds no more such bytes than the top-level floats' own eight
        bytes each (packed as they are, ``cb`` and the double), none is outside them. Else
        pack the values of ``obj`` again without its top-level floats (and each tagged value
        as the extension it became); no such byte then proves there is no ``bin``. ``True``
        when unsure."""
        if type(obj) is dict:  # its keys are strings (or the pack failed): never a bin
            items: Any = obj.values()
        elif type(obj) is list:
            items = obj
        else:
            return True
        floats = [v for v in items if type(v) is float]
        if floats:
            inside = b"".join(map(_DOUBLE, floats)).translate(None, _NOT_BIN)
            if len(inside) == len(packed.translate(None, _NOT_BIN)):
                return False  # each such byte is one of a top-level float's
        probe = [v for v in items if type(v) is not float]

        def reuse(value: Any) -> Any:
            return made[id(value)][1]  # KeyError: not met before, so unsure

        try:
            again: bytes = ormsgpack.packb(probe, default=reuse, option=option)
        except TypeError:
            return True
        return _may_hold_bin(again)

    def _dumps_walked(self, obj: Any) -> bytes:
        """``dumps`` by walking ``obj`` in Python first (:meth:`_encode`): what decides
        every value :meth:`_pack_native` is unsure of."""
        ormsgpack = _ormsgpack("write msgpack")
        try:
            tree = self._encode(obj)
        except RecursionError:
            raise self._too_deep() from None
        option = ormsgpack.OPT_PASSTHROUGH_SUBCLASS  # subclasses come to ``extend``
        depth = 0

        def extend(value: Any) -> Any:
            """A tagged value becomes an extension; a ``str``/``int``/``float`` subclass that
            is not an enum is stored as the plain value, as JSON stores it."""
            nonlocal depth
            kind = type(value)
            if kind is _Tagged or kind is _SharedTagged:
                # One packed before no shallower than here: what it nests stays in the limit.
                if kind is _SharedTagged and value.ext is not None and value.depth >= depth:
                    return value.ext
                depth += 1
                try:
                    if depth > _MAX_TAG_DEPTH:  # the reader would refuse it: write JSON
                        msg = "tagged values nested too deeply for msgpack"
                        raise TypeError(msg)
                    packed = ormsgpack.packb(dict(value), default=extend, option=option)
                    ext = ormsgpack.Ext(_EXT_TAGGED, packed)
                finally:
                    depth -= 1
                if kind is _SharedTagged:
                    value.ext, value.depth = ext, depth
                return ext
            for plain in (str, int, float):
                if isinstance(value, plain):
                    return plain(value)
            msg = f"msgpack cannot store a value of type {type(value).__qualname__!r}"
            raise TypeError(msg)

        try:
            packed: bytes = ormsgpack.packb(tree, default=extend, option=option)
        except TypeError:  # what msgpack cannot hold (see the class docstring)
            return _json_bytes(tree)
        finally:
            extend = _as_is  # a cycle otherwise (see _pack_native)
        return MSGPACK_MAGIC + packed


class _TagHook:
    """:meth:`_TaggedSerializer._ext_hook`'s hook: an object, as a closure handing itself to
    the inner decoder would be a cycle (the function and its cell) that only the garbage
    collector frees, a dozen objects every ``loads``."""

    __slots__ = ("depth", "errors", "ormsgpack", "serializer")

    def __init__(
        self, serializer: _TaggedSerializer, ormsgpack: Any, errors: list[BaseException]
    ) -> None:
        self.serializer = serializer
        self.ormsgpack = ormsgpack
        self.errors = errors
        self.depth = 0

    def __call__(self, code: int, packed: bytes) -> Any:
        self.depth += 1
        try:
            if self.depth > _MAX_TAG_DEPTH:  # each level is a Python call: stop well before
                msg = "stored data is nested too deeply to decode (corrupt or hostile)."
                raise CheckpointDecodeError(msg)
            if code != _EXT_TAGGED:
                msg = (
                    f"stored value has unknown extension type {code}, likely written by a "
                    "newer release: upgrade tensorsketch-core to read it."
                )
                raise CheckpointDecodeError(msg)
            mapping = self.ormsgpack.unpackb(packed, ext_hook=self)
            if type(mapping) is not dict or _TAG not in mapping:
                msg = "stored tagged value is not a tag mapping (corrupt or hostile)."
                raise CheckpointDecodeError(msg)
            return self.serializer._decode_object(mapping)
        except BaseException as exc:
            self.errors.append(exc)
            raise
        finally:
            self.depth -= 1


def _as_is(value: Any) -> Any:
    """The item encoder of msgpack's native walk: items are left to it."""
    return value


#: How the tag key ``$t`` is packed (a fixstr): each tag mapping holds it once.
_TAG_KEY_PACKED = b"\xa2$t"


def _may_hold_bin(packed: bytes) -> bool:
    return b"\xc4" in packed or b"\xc5" in packed or b"\xc6" in packed


#: Every byte but those a ``bin`` header starts with: deleted, the length left counts those.
_NOT_BIN = bytes(b for b in range(256) if b not in (0xC4, 0xC5, 0xC6))


#: A float's eight bytes as msgpack writes them after its ``cb`` (big-endian IEEE 754).
_DOUBLE = struct.Struct(">d").pack


def _native_option(ormsgpack: Any) -> int:
    """What the native walk hands to ``default``: every type the walk tags, and subclasses."""
    return int(
        ormsgpack.OPT_PASSTHROUGH_SUBCLASS
        | ormsgpack.OPT_PASSTHROUGH_DATACLASS
        | ormsgpack.OPT_PASSTHROUGH_DATETIME
        | ormsgpack.OPT_PASSTHROUGH_TUPLE
        | ormsgpack.OPT_PASSTHROUGH_ENUM
        | ormsgpack.OPT_PASSTHROUGH_UUID
    )


def _json_bytes(tree: Any) -> bytes:
    try:
        return json.dumps(tree, separators=(",", ":"), allow_nan=True).encode()
    except RecursionError:
        msg = "cannot store a value nested this deeply; flatten it."
        raise ValueError(msg) from None


def _ormsgpack(why: str) -> Any:
    try:
        import ormsgpack  # noqa: PLC0415 - ormsgpack loads at the first msgpack payload
    except ImportError:
        msg = (
            f"ormsgpack is needed to {why} (MsgpackSerializer, the default serializer); "
            "tensorsketch-core depends on it, so reinstall with `pip install tensorsketch-core`, "
            "or pass serializer='json' to the backend."
        )
        raise ModuleNotFoundError(msg) from None
    return ormsgpack


class PickleSerializer:
    """Round-trips any picklable object. Loading runs code: use only with trusted stores."""

    name = "pickle"

    def dumps(self, obj: Any) -> bytes:
        try:
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        except (TypeError, AttributeError, pickle.PicklingError) as exc:  # a lock, a lambda
            msg = f"PickleSerializer cannot store this value: {exc}"
            raise UnstorableValueError(msg) from exc

    def loads(self, data: bytes) -> Any:
        try:
            return pickle.loads(data)
        except Exception as exc:
            msg = f"stored pickle cannot be loaded: {type(exc).__name__}: {exc}"
            raise CheckpointDecodeError(msg) from exc


def resolve_serializer(serializer: Serializer | str | None) -> Serializer:
    """``None``/``"msgpack"`` → :class:`MsgpackSerializer`; ``"json"`` →
    :class:`JsonSerializer`; ``"pickle"`` → :class:`PickleSerializer`."""
    if serializer == "json":
        return JsonSerializer()
    if serializer is None or serializer == "msgpack":
        _ormsgpack("write msgpack")  # say so now, not at the first checkpoint
        return MsgpackSerializer()
    if serializer == "pickle":
        return PickleSerializer()
    if isinstance(serializer, str):
        msg = (
            f"unknown serializer {serializer!r}; use 'json', 'msgpack', 'pickle' or a "
            "Serializer object."
        )
        raise ValueError(msg)
    if not isinstance(serializer, Serializer):
        msg = f"serializer must have dumps(obj) -> bytes and loads(bytes), got {serializer!r}."
        raise TypeError(msg)
    return serializer


def refused_field(
    serializer: Serializer, values: Mapping[str, Any]
) -> tuple[str, Exception] | None:
    """The first entry of ``values`` the serializer refuses on its own, with its error: after
    a whole payload failed to encode, which field was it (each is encoded once more, so only
    on that failure)."""
    for name, value in values.items():
        try:
            serializer.dumps(value)
        except (TypeError, ValueError) as exc:
            return name, exc
    return None
