"""Checked by mypy in the `typecheck` session (not run by pytest): the public API is generic,
so a type checker knows what `invoke` returns in every authoring style."""

from __future__ import annotations

from typing import assert_type

from tensorsketch import END, START, CompiledGraph, Context, Graph, Node, Schema


class State(Schema):
    text: str
    shout: str = ""


class Shout(Node):
    class In(Schema):
        text: str

    class Out(Schema):
        shout: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(shout=inp.text.upper())


async def fluent() -> None:
    app = Graph(State).add(Shout).edge(START, "Shout").edge("Shout", END).compile()
    assert_type(app, CompiledGraph[State])
    out = await app.invoke({"text": "hi"})
    assert_type(out, State)
    assert_type(out.shout, str)


async def statements() -> None:
    g: Graph[State] = Graph(State)
    g.add(Shout)
    g.edge(START, "Shout")
    app = g.compile()
    state = await app.aget_state("t", backend=None)  # type: ignore[arg-type]
    assert_type(state, State | None)


async def arrows() -> None:
    g = Graph(State)
    (shout,) = g.nodes(Shout)
    START >> shout >> END
    out = await g.compile().invoke(State(text="x"))
    assert_type(out.text, str)
