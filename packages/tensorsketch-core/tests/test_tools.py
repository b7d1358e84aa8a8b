from __future__ import annotations

import json
import re
import threading
from typing import Any, Literal

import pytest

from tensorsketch import END, START, Context, Graph, Node, Schema, Tool, ValidationError, tool
from tensorsketch.tools import parse_docstring


class Address(Schema):
    street: str
    city: str


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def test_schema_from_signature_is_exact() -> None:
    assert add.json_schema() == {
        "additionalProperties": False,
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "type": "object",
    }


def test_defaults_optionals_literals_and_nested_models() -> None:
    @tool
    def ship(to: Address, speed: Literal["slow", "fast"] = "slow", note: str | None = None) -> str:
        """Ship a parcel."""
        return f"{to.city}:{speed}:{note}"

    schema = ship.json_schema()
    assert schema["required"] == ["to"]
    assert schema["properties"]["speed"] == {
        "default": "slow",
        "enum": ["slow", "fast"],
        "type": "string",
    }
    assert schema["properties"]["to"] == {"$ref": "#/$defs/Address"}
    assert schema["$defs"]["Address"]["required"] == ["street", "city"]
    assert "title" not in json.dumps(schema)


async def test_nested_model_arguments_are_validated_into_models() -> None:
    @tool
    def ship(to: Address) -> str:
        """Ship a parcel."""
        assert isinstance(to, Address)
        return to.city

    assert await ship.run({"to": {"street": "Main 1", "city": "Oslo"}}) == "Oslo"
    with pytest.raises(ValidationError, match=r"`to.city`: missing required argument"):
        await ship.run({"to": {"street": "Main 1"}})


def test_schema_text_is_byte_stable_and_sorted() -> None:
    def make() -> Tool:
        @tool
        def search(query: str, limit: int = 10, zone: str = "eu") -> list[str]:
            """Search.

            Args:
                query: what to look for.
                limit: most results.
                zone: where.
            """
            return []

        return search

    first, second = make(), make()
    assert first.schema_text() == second.schema_text()
    assert first.schema_text() == json.dumps(
        first.json_schema(), sort_keys=True, separators=(",", ":")
    )
    assert list(first.json_schema()) == sorted(first.json_schema())
    assert list(first.json_schema()["properties"]) == ["limit", "query", "zone"]


def test_json_schema_returns_a_copy() -> None:
    schema = add.json_schema()
    schema["properties"]["a"]["type"] = "string"
    assert add.json_schema()["properties"]["a"]["type"] == "integer"


def test_name_and_description_overrides() -> None:
    @tool(name="plus", description="Sum two integers.")
    def add2(a: int, b: int) -> int:
        return a + b

    assert (add2.name, add2.description) == ("plus", "Sum two integers.")
    assert add2(2, 2) == 4  # still callable as the plain function


async def test_run_validates_before_calling() -> None:
    called: list[Any] = []

    @tool
    def record(n: int) -> int:
        """Record n."""
        called.append(n)
        return n

    with pytest.raises(ValidationError) as info:
        await record.run({"n": "oops"})
    message = str(info.value)
    assert "invalid arguments for tool 'record'" in message
    assert "`n`" in message and "'oops'" in message
    assert "Call the tool again" in message
    assert called == []
    with pytest.raises(ValidationError, match="`extra`: unexpected argument"):
        await record.run({"n": 1, "extra": 2})
    with pytest.raises(ValidationError, match="`n`: missing required argument"):
        await record.run({})
    with pytest.raises(ValidationError, match="not valid JSON"):
        await record.run("{nope")
    assert await record.run('{"n": 4}') == 4  # JSON text, as some APIs send it


async def test_sync_tools_run_off_the_event_loop_and_async_are_awaited() -> None:
    loop_thread = threading.get_ident()

    @tool
    def where() -> int:
        """Which thread."""
        return threading.get_ident()

    @tool
    async def where_async() -> int:
        """Which thread, async."""
        return threading.get_ident()

    assert await where.run({}) != loop_thread
    assert await where_async.run({}) == loop_thread


async def test_ctx_is_injected_and_never_advertised() -> None:
    @tool
    async def note(ctx: Context, text: str) -> str:
        """Note something durably."""
        return await ctx.step("save", lambda: f"{ctx.node}:{text}")

    assert "ctx" not in note.json_schema()["properties"]
    assert note.json_schema()["required"] == ["text"]

    class State(Schema):
        text: str
        out: str = ""

    class UseTool(Node):
        class In(Schema):
            text: str

        class Out(Schema):
            out: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(out=await note.run({"text": inp.text}, ctx=ctx))

    app = Graph(State).add(UseTool).edge(START, "UseTool").edge("UseTool", END).compile()
    assert (await app.invoke({"text": "hi"})).out == "UseTool:hi"
    with pytest.raises(ValidationError, match="`ctx`: unexpected argument"):
        await note.run({"text": "x", "ctx": "forged"})


def test_google_numpy_and_sphinx_docstrings() -> None:
    google = """Find flights.

    Longer text.

    Args:
        origin (str): where from,
            as an IATA code.
        when: the date.

    Returns:
        flights.
    """
    assert parse_docstring(google) == (
        "Find flights.\n\nLonger text.",
        {"origin": "where from, as an IATA code.", "when": "the date."},
    )
    numpy = """Find flights.

    Parameters
    ----------
    origin : str
        where from.
    when : str
        the date,
        local time.

    Returns
    -------
    list
    """
    assert parse_docstring(numpy) == (
        "Find flights.",
        {"origin": "where from.", "when": "the date, local time."},
    )
    sphinx = """Find flights.

    :param origin: where from.
    :param str when: the date.
    :returns: flights.
    """
    assert parse_docstring(sphinx) == (
        "Find flights.",
        {"origin": "where from.", "when": "the date."},
    )


def test_param_descriptions_reach_the_schema() -> None:
    @tool
    def book(origin: str, seats: int = 1) -> str:
        """Book a flight.

        :param origin: the departure airport.
        :param seats: how many seats.
        """
        return origin

    props = book.json_schema()["properties"]
    assert props["origin"] == {"description": "the departure airport.", "type": "string"}
    assert props["seats"]["description"] == "how many seats."
    assert book.description == "Book a flight."


def test_bad_definitions_fail_with_a_fix() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        """No annotation."""

    with pytest.raises(TypeError, match="parameter 'x' has no type annotation"):
        tool(untyped)

    def star(*args: int) -> None:
        """Varargs."""

    with pytest.raises(TypeError, match="list each argument explicitly"):
        tool(star)
    with pytest.raises(ValueError, match="not usable by model APIs"):
        tool(name="has space")(add.fn)


async def test_from_schema_validates_and_passes_the_dict() -> None:
    received: list[dict[str, Any]] = []

    async def handler(args: dict[str, Any]) -> str:
        received.append(args)
        return "ok"

    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 2},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "units": {"enum": ["c", "f"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    forecast = Tool.from_schema("forecast", "Weather forecast.", schema, handler)
    assert isinstance(forecast, Tool) and forecast.description == "Weather forecast."
    assert await forecast.run({"city": "Oslo", "days": 3}) == "ok"
    assert received == [{"city": "Oslo", "days": 3}]
    for bad, fragment in [
        ({}, "`city`: missing required argument"),
        ({"city": 5}, "`city`: expected string"),
        ({"city": "Oslo", "days": 9}, "violates maximum 7"),
        ({"city": "Oslo", "units": "k"}, "must be one of ['c', 'f']"),
        ({"city": "Oslo", "x": 1}, "`x`: unexpected argument"),
        ({"city": "O"}, "shorter than minLength 2"),
    ]:
        with pytest.raises(ValidationError, match=re.escape(fragment)):
            await forecast.run(bad)
    assert len(received) == 1
    assert forecast.schema_text() == json.dumps(schema, sort_keys=True, separators=(",", ":"))


async def test_from_schema_passes_ctx_when_asked() -> None:
    def handler(args: dict[str, Any], ctx: Context | None = None) -> str:
        return f"{args['q']}:{ctx}"

    echo = Tool.from_schema("echo", "Echo.", {"properties": {"q": {"type": "string"}}}, handler)
    assert await echo.run({"q": "x"}) == "x:None"
    with pytest.raises(ValueError, match="must describe an object"):
        Tool.from_schema("bad", "Bad.", {"type": "string"}, handler)


def test_requires_approval_flag() -> None:
    @tool(requires_approval=True)
    def refund(order: int) -> str:
        """Refund an order."""
        return "done"

    assert refund.requires_approval and not add.requires_approval
    assert repr(refund) == "Tool('refund', requires_approval=True)"


def test_docstring_parser_and_validator_live_in_private_modules() -> None:
    import tensorsketch._docstrings as docstrings
    import tensorsketch._jsonschema as jsonschema
    import tensorsketch.tools as tools

    # The documented path stays; the code lives in its own module.
    assert tools.parse_docstring is docstrings.parse_docstring
    assert "parse_docstring" in tools.__all__
    assert jsonschema.validate_json({"type": "integer"}, 3) == []
    assert jsonschema.validate_json({"type": "object", "required": ["a"]}, {}) == [
        "`a`: missing required argument"
    ]
