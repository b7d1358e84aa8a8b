"""``response_format``: a client's JSON schema as the answering agent's ``output_schema``.

A chat request with ``response_format`` ``json_schema`` (or ``json_object``) runs on a variant
of the graph whose answering agent has the client's schema as its ``output_schema``: the model
is asked for it through the provider's structured-output support, and a reply that does not
validate is sent back with the problems until it does (the agent's repair loop). The answer
is the validated JSON. A graph that cannot answer that way — no agent writes its ``output``,
its reply comes from a ``to_reply`` of its own, or its agent answers in a schema of its own —
is refused with a 400 that says which.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import pydantic
from pydantic_core import PydanticCustomError

from tensorsketch._jsonschema import validate_json
from tensorsketch.agents import Agent
from tensorsketch.provider import StructuredOutputError, parse_structured
from tensorsketch.schema import Schema
from tensorsketch.serve._adapter import ChatAdapter, agent_reply
from tensorsketch.serve._http import ServeError
from tensorsketch.serve._variants import agents_of, with_agents

if TYPE_CHECKING:
    from tensorsketch.pregel.compiled import CompiledGraph

__all__ = [
    "JsonAnswer",
    "ResponseFormat",
    "answer_schema",
    "formatted_graph",
    "formatted_reply",
    "parse_format",
    "parse_text_format",
]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: A problem from the JSON-schema validator: "`path`: what is wrong" (or "the arguments: ...").
_PROBLEM = re.compile(r"(?:`(?P<path>[^`]*)`|the arguments): (?P<what>.*)", re.DOTALL)
#: The validator speaks of tool arguments; an answer has fields.
_WORDS = {
    "missing required argument": "missing required field",
    "unexpected argument": "unexpected field",
}


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """What a request's ``response_format`` asks for: ``kind`` is ``json_schema`` or
    ``json_object``; ``name`` and ``schema`` the JSON schema the answer must match."""

    kind: str
    name: str
    schema: dict[str, Any]
    description: str = ""


def _bad(message: str, param: str) -> ServeError:
    return ServeError(400, message, param=param, code="invalid_request_error")


def parse_format(value: Any, param: str = "response_format") -> ResponseFormat | None:
    """The request's ``response_format`` (``None`` for none or ``{"type": "text"}``); a 400
    naming the field for one that is malformed."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _bad(f"`{param}` must be an object such as {{'type': 'json_object'}}.", param)
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat("json_object", "json_object", {"type": "object"})
    if kind != "json_schema":
        msg = f"`{param}.type` is {kind!r}; use 'text', 'json_object' or 'json_schema'."
        raise _bad(msg, f"{param}.type")
    spec = value.get("json_schema")
    if not isinstance(spec, Mapping):
        msg = f"`{param}.json_schema` must be an object with `name` and `schema`."
        raise _bad(msg, f"{param}.json_schema")
    return _json_schema(spec, f"{param}.json_schema")


def parse_text_format(value: Any, param: str = "text") -> ResponseFormat | None:
    """The Responses API's ``text.format`` (``json_schema`` carries ``name`` and ``schema``
    beside its ``type``), as :func:`parse_format` reads ``response_format``."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _bad(f"`{param}` must be an object such as {{'format': {{'type': 'text'}}}}.", param)
    found = value.get("format")
    if found is None:
        return None
    where = f"{param}.format"
    if not isinstance(found, Mapping):
        raise _bad(f"`{where}` must be an object such as {{'type': 'json_object'}}.", where)
    if found.get("type") == "json_schema":
        return _json_schema(found, where)
    return parse_format(found, where)


def _json_schema(spec: Mapping[str, Any], param: str) -> ResponseFormat:
    """``{"name", "schema", "description"?, "strict"?}`` (a Responses ``text.format`` too)."""
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        msg = f"`{param}.name` must be 1-64 letters, digits, '_' or '-', got {name!r:.80}."
        raise _bad(msg, f"{param}.name")
    schema = spec.get("schema")
    if not isinstance(schema, Mapping):
        msg = f"`{param}.schema` must be a JSON schema object, got {type(schema).__name__}."
        raise _bad(msg, f"{param}.schema")
    description = spec.get("description") or ""
    if not isinstance(description, str):
        raise _bad(f"`{param}.description` must be a string.", f"{param}.description")
    return ResponseFormat("json_schema", name, copy.deepcopy(dict(schema)), description)


class JsonAnswer(Schema):
    """The base of the output schemas made from a client's JSON schema.

    The schema advertised to the model is the client's own (``model_json_schema``), and
    validating checks a reply against it and returns the JSON data itself rather than an
    instance: what the agent journals and keeps in ``parsed`` is plain data, which every
    backend stores (an instance of a class made per request could not be loaded again).
    """

    json_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(cls.json_schema)

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        problems = validate_json(cls.json_schema, obj)
        if problems:
            raise pydantic.ValidationError.from_exception_data(
                cls.__name__, [_line_error(p, obj) for p in problems]
            )
        return obj


def _line_error(problem: str, value: Any) -> Any:
    for word, better in _WORDS.items():
        problem = problem.replace(word, better)
    found = _PROBLEM.fullmatch(problem)
    path, what = (found["path"] or "", found["what"]) if found else ("", problem)
    error = PydanticCustomError("json_schema", "{what}", {"what": what})
    return {"type": error, "loc": tuple(path.split(".")) if path else (), "input": value}


def answer_schema(fmt: ResponseFormat) -> type[JsonAnswer]:
    """An ``output_schema`` class standing for ``fmt``'s JSON schema (named after it); the
    same format gets the same class, so clients repeating one schema do not make a class per
    request. The schema's key order is kept: it is the order the model is asked to write in."""
    return _answer_class(fmt.name, fmt.description, json.dumps(fmt.schema))


@functools.lru_cache(maxsize=256)
def _answer_class(name: str, description: str, schema_text: str) -> type[JsonAnswer]:
    attributes = {"json_schema": json.loads(schema_text), "__doc__": description or None}
    made = type(name, (JsonAnswer,), {"__module__": __name__, **attributes})
    return made


def formatted_graph(
    graph: CompiledGraph[Any], adapter: ChatAdapter, fmt: ResponseFormat, param: str
) -> CompiledGraph[Any]:
    """The graph whose answering agent answers in ``fmt``, or a 400 saying why it cannot."""
    if adapter.to_reply is not agent_reply:
        msg = (
            f"`{param}` asks for a JSON answer, but graph {graph.name!r} makes its reply with "
            "its own to_reply(), which the server cannot hold to a schema; ask without "
            f"`{param}`, or serve an agent graph (whose reply is its agent's `output`)."
        )
        raise _bad(msg, param)
    answering = [n for n in agents_of(graph) if _agent(graph, n).output_key == "output"]
    if len(answering) != 1:
        found = ", ".join(repr(n) for n in answering)
        why = f"several agents write it ({found})" if answering else "no agent node writes it"
        msg = (
            f"`{param}` asks for a JSON answer, but graph {graph.name!r} cannot give one: its "
            f"reply is the state's `output` and {why}; ask without `{param}`."
        )
        raise _bad(msg, param)
    [name] = answering
    own = _agent(graph, name).output_schema
    if own is not None:
        if fmt.kind == "json_object":
            return graph  # it already answers with a JSON object of its own schema
        msg = (
            f"`{param}` asks for the JSON schema {fmt.name!r}, but agent {name!r} answers in "
            f"its own schema {own.__name__!r}; send {{'type': 'json_object'}} to get that, or "
            f"ask without `{param}`."
        )
        raise _bad(msg, param)
    return with_agents(graph, [name], output_schema=answer_schema(fmt))


def _agent(graph: CompiledGraph[Any], name: str) -> Agent:
    node = graph.spec.nodes[name].node
    assert isinstance(node, Agent)
    return node


def formatted_reply(text: str, fmt: ResponseFormat) -> str:
    """The answer as compact JSON when it matches ``fmt`` (a code fence around it dropped);
    otherwise as it is — an agent that stopped early (``finish_reason: "length"``) may not
    have repaired its last reply."""
    try:
        data = parse_structured(text, answer_schema(fmt))
    except StructuredOutputError:
        return text
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
