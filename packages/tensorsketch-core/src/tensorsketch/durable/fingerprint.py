"""When decoded checkpoint values can be trusted as they are, without validating them again."""

from __future__ import annotations

import hashlib
import json
import warnings
import weakref

from pydantic import BaseModel

from tensorsketch.serializers import JsonSerializer, MsgpackSerializer, PickleSerializer, Serializer

__all__ = ["is_exact", "schema_fingerprint"]

#: Serializers that give back exactly the values they were given (types included), the
#: condition for taking decoded values on trust; a custom one may be lossy.
_EXACT_SERIALIZERS = (JsonSerializer, MsgpackSerializer, PickleSerializer)


_FINGERPRINTS: weakref.WeakKeyDictionary[type[BaseModel], str | None] = weakref.WeakKeyDictionary()


def schema_fingerprint(schema: type[BaseModel]) -> str | None:
    """A short, stable digest of what ``schema`` accepts: its JSON schema (field names,
    types, nested shapes, constraints, defaults). Every checkpoint carries the digest of the
    state that wrote it, so a read by the same schema can take the decoded values as they are
    instead of validating them again: they were valid when written, and the serializer's
    type tags already rebuilt the models, dataclasses and enums among them.

    ``None`` (never trusted: always validated) for a schema with validator functions, whose
    code can change without changing the digest, or one without a JSON schema.
    """
    if schema in _FINGERPRINTS:
        return _FINGERPRINTS[schema]
    found: str | None = None
    decorators = schema.__pydantic_decorators__
    plain = not (
        decorators.field_validators or decorators.model_validators or decorators.validators
    ) and not any(
        type(m).__module__ == "pydantic.functional_validators"
        for info in schema.model_fields.values()
        for m in info.metadata
    )
    if plain:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a default JSON cannot show is still hashed
                document = schema.model_json_schema(mode="validation")
            text = json.dumps(document, sort_keys=True, default=repr)
        except Exception:
            text = None
        if text is not None:
            found = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    _FINGERPRINTS[schema] = found
    return found


def is_exact(serializer: Serializer) -> bool:
    """Whether ``serializer`` is one of ours that round-trips values exactly (not a subclass)."""
    return type(serializer) in _EXACT_SERIALIZERS
