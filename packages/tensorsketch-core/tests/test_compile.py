"""compile() rejects every documented structural mistake with a message that teaches."""

from __future__ import annotations

from typing import Literal

import pytest

from tensorsketch import END, START, Context, Graph, GraphValidationError, Node, Schema


class Support(Schema):
    query: str
    intent: Literal["billing", "tech", "other"] = "other"
    answer: str = ""
    count: int = 0


class Classify(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        intent: Literal["billing", "tech", "other"]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(intent="billing")


class Billing(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer="b")


def problems_of(graph: Graph[Support]) -> list[str]:
    with pytest.raises(GraphValidationError) as info:
        graph.compile()
    return info.value.problems


def test_no_entry() -> None:
    (problem,) = problems_of(Graph(Support).add(Classify))
    assert "no entry node" in problem
    assert "edge(START, 'Classify')" in problem


def test_edge_to_unknown_node_suggests_the_close_name() -> None:
    g = Graph(Support).add(Classify).add(Billing).edge(START, "Classify").edge("Classify", "Biling")
    (problem,) = problems_of(g)
    assert "unknown node 'Biling'" in problem
    assert "did you mean 'Billing'?" in problem


def test_start_is_named_start_and_a_case_only_typo_gets_a_did_you_mean() -> None:
    """``edge(START, "classify")``: the message said ``'__start__'`` and listed the nodes
    instead of suggesting the one that differs only in case (too short for difflib)."""
    g = Graph(Support).add(Classify).add(Billing).edge(START, "classify")
    (problem,) = problems_of(g)
    assert problem.startswith("edge from START points at unknown node 'classify'")
    assert "did you mean 'Classify'?" in problem
    assert "__start__" not in problem
    g = Graph(Support).add(Classify).add(Billing).edge(START, "Classify").edge("billing", END)
    (problem,) = problems_of(g)
    assert "edge source 'billing' is not a node — did you mean 'Billing'?" in problem


def test_start_with_static_and_conditional_edges_is_named_start() -> None:
    g = (
        Graph(Support)
        .add(Classify)
        .add(Billing)
        .edge(START, "Classify")
        .conditional(START, lambda s: "Billing")
    )
    (problem,) = problems_of(g)
    assert problem.startswith("START has both static edges and a conditional edge")


def test_unknown_edge_source_and_conditional_target() -> None:
    g = (
        Graph(Support)
        .add(Classify)
        .add(Billing)
        .edge(START, "Classify")
        .edge("Nope", "Billing")
        .conditional("Classify", lambda s: s.intent, {"billing": "Billing", "tech": "Tech"})
    )
    problems = problems_of(g)
    assert any("edge source 'Nope' is not a node" in p for p in problems)
    assert any("key 'tech'" in p and "unknown node 'Tech'" in p for p in problems)


def test_port_reading_a_missing_state_field() -> None:
    class Reads(Node):
        class In(Schema):
            querry: str

        async def run(self, ctx: Context, inp: In) -> None:
            return None

    (problem,) = problems_of(Graph(Support).add(Reads).edge(START, "Reads"))
    assert "reads `querry`" in problem
    assert "did you mean 'query'?" in problem


def test_port_writing_a_missing_state_field() -> None:
    class Writes(Node):
        class Out(Schema):
            verdict: str

        async def run(self, ctx: Context, inp: object) -> None:
            return None

    (problem,) = problems_of(Graph(Support).add(Writes).edge(START, "Writes"))
    assert "writes `verdict`" in problem
    assert "add `verdict: str` to the state schema" in problem


@pytest.mark.parametrize(
    ("port_type", "direction", "fragment"),
    [
        (int, "Out", "writes `answer: int`"),
        (str, "Out", "writes `intent: str`"),  # str does not fit Literal[...]
        (int, "In", "reads `query: int`"),
    ],
)
def test_port_type_incompatible_with_channel(
    port_type: type, direction: str, fragment: str
) -> None:
    field = {"writes `answer": "answer", "writes `intent": "intent", "reads `query": "query"}[
        fragment.split(":")[0]
    ]
    from pydantic import create_model

    schema = create_model("Port", __base__=Schema, **{field: (port_type, ...)})  # type: ignore[call-overload]

    class Bad(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            return None

    setattr(Bad, direction, schema)
    (problem,) = problems_of(Graph(Support).add(Bad).edge(START, "Bad"))
    assert fragment in problem


def test_compatible_port_types_pass() -> None:
    class Narrow(Node):
        class In(Schema):
            intent: str  # Literal[...] is assignable to str

        class Out(Schema):
            count: bool  # bool widens to int

        async def run(self, ctx: Context, inp: In) -> None:
            return None

    Graph(Support).add(Narrow).edge(START, "Narrow").compile()


def test_static_and_conditional_successors() -> None:
    g = (
        Graph(Support)
        .add(Classify)
        .add(Billing)
        .edge(START, "Classify")
        .edge("Classify", "Billing")
        .conditional("Classify", lambda s: "Billing")
    )
    (problem,) = problems_of(g)
    assert "both static edges and a conditional edge" in problem


def test_duplicate_node_name() -> None:
    g = Graph(Support).add(Classify).add(Classify).edge(START, "Classify")
    (problem,) = problems_of(g)
    assert "duplicate node name 'Classify'" in problem
    assert 'name="..."' in problem


def test_all_problems_reported_at_once() -> None:
    g = Graph(Support).add(Classify).add(Classify).edge("Classify", "Ghost")
    problems = problems_of(g)
    assert len(problems) == 3  # duplicate, unknown target, no entry
    with pytest.raises(GraphValidationError, match="3 problems"):
        g.compile()


def test_reserved_names_and_bad_arguments() -> None:
    assert problems_of(Graph(Support).add(Classify, name=END).edge(START, END))
    with pytest.raises(TypeError, match="Schema subclass"):
        Graph(dict)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="takes a Node subclass or instance"):
        Graph(Support).add(print)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs a callable path"):
        Graph(Support).add(Classify).conditional("Classify", "Billing")  # type: ignore[arg-type]


def test_sync_run_is_rejected() -> None:
    class Sync(Node):
        def run(self, ctx: Context, inp: object) -> None:  # type: ignore[override]
            return None

    (problem,) = problems_of(Graph(Support).add(Sync).edge(START, "Sync"))
    assert "must be `async def run" in problem


def test_node_named_with_alias_and_edges_to_end() -> None:
    app = (
        Graph(Support)
        .add(Classify, name="Triage")
        .add(Billing)
        .edge(START, "Triage")
        .edge("Triage", "Billing")
        .edge("Billing", END)
        .compile()
    )
    assert app.structure.nodes == ("Triage", "Billing")
    assert app.structure.edges[0] == (START, "Triage")


# -- nodes whose ports come from their options ------------------------------------------------


class Extras(Node):
    """Writes ``extra`` only where the state keeps it; its ``note`` port is an option's."""

    class Out(Schema):
        note: str = ""
        extra: int = 0

    def optional_outputs(self) -> tuple[str, ...]:
        return ("extra",)

    def port_hint(self, port: str, state_fields: object) -> str | None:
        return "; pass Extras(note_key=...)." if port == "note" else None

    async def run(self, ctx: Context, inp: object) -> Out:
        return self.Out(note="n", extra=7)


def test_an_optional_output_is_written_only_where_the_state_keeps_it() -> None:
    class Keeps(Schema):
        note: str = ""
        extra: int = 0

    class Lacks(Schema):
        note: str = ""

    def build(state: type[Schema]) -> Graph[Schema]:
        return Graph(state).add(Extras).edge(START, "Extras").edge("Extras", END)

    assert build(Keeps).compile().spec.nodes["Extras"].writes == ("note", "extra")
    assert build(Lacks).compile().spec.nodes["Extras"].writes == ("note",)


def test_a_node_hint_replaces_the_rename_advice() -> None:
    class Empty(Schema):
        other: str = ""

    with pytest.raises(GraphValidationError) as info:
        Graph(Empty).add(Extras).edge(START, "Extras").edge("Extras", END).compile()
    assert "writes `note`, but Empty has no field 'note'; pass Extras(note_key=...)." in str(
        info.value
    )
    assert "rename the port" not in str(info.value)


async def test_a_suspension_write_to_an_optional_output_the_state_lacks_is_dropped() -> None:
    from tensorsketch.interrupts import run_info
    from tensorsketch.suspension import Interrupt

    class Pausing(Extras):
        async def run(self, ctx: Context, inp: object) -> Extras.Out:
            raise Interrupt("why?", id="q", writes={"note": "asked", "extra": 1})

    class Lacks(Schema):
        note: str = ""

    graph = Graph(Lacks).add(Pausing).edge(START, "Pausing").edge("Pausing", END).compile()
    state = await graph.invoke({})
    assert state.note == "asked"
    assert run_info(state).suspended
