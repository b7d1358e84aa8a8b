"""Extraction: every authoring shape the docs describe, read without importing anything."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tensorsketch.canvas import (
    GraphNotFoundError,
    SourceParseError,
    edits,
    extract,
    extract_all,
    graph_names,
    reconstruct,
)
from tensorsketch.canvas.ir import END, START, EdgeIR, NodeIR, Port

NODES = textwrap.dedent(
    """
    from tensorsketch import Context, Graph, Hole, Node, Router, Schema, START, END

    class Classify(Node):
        class In(Schema):
            query: str
        class Out(Schema):
            intent: Annotated[str, Reducer(add)]

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(intent="billing")

    class Billing(Node):
        class In(Schema):  query: str
        class Out(Schema): answer: str

        async def run(self, ctx, inp):
            '''Answer billing questions.'''
            raise Hole("Answer billing questions using the KB tool")

    class Tech(Node):
        async def run(self, ctx, inp):
            raise Hole
    """
)


def src(wiring: str) -> str:
    return NODES + "\n" + textwrap.dedent(wiring)


def seq(a: str, b: str) -> EdgeIR:
    return EdgeIR(a, b)


def test_node_classes_give_ports_holes_and_lines() -> None:
    ir = extract(src("g = Graph(S)\ng.add(Classify)\ng.add(Billing)\ng.add(Tech)\n"))
    classify, billing, tech = ir.nodes
    assert classify.inputs == [Port("query", "str")]
    assert classify.outputs == [Port("intent", "Annotated[str, Reducer(add)]")]
    assert (classify.has_hole, classify.hole) == (False, None)
    assert billing.inputs == [Port("query", "str")]  # one-line `class In(Schema):  query: str`
    assert (billing.has_hole, billing.hole) == (True, "Answer billing questions using the KB tool")
    assert (tech.has_hole, tech.hole, tech.inputs) == (True, None, [])  # a bare `raise Hole`


def test_line_numbers_point_at_the_class_statement() -> None:
    source = src("g = Graph(S).add(Billing)\n")
    ir = extract(source)
    line = ir.nodes[0].line
    assert line is not None
    assert source.splitlines()[line - 1] == "class Billing(Node):"


def test_fluent_chain_with_entry_sugar_and_aliases() -> None:
    ir = extract(
        src(
            """
            app = (
                Graph(S)
                .add(Classify).add(Classify, name="Triage")
                .entry("Triage")
                .edge("Triage", END)
            ).compile()
            """
        )
    )
    assert ir.name == "app"
    assert ir.state == "S"
    assert ir.style == "fluent"
    assert [(n.name, n.cls) for n in ir.nodes] == [("Classify", "Classify"), ("Triage", "Classify")]
    assert ir.nodes[1].inputs == [Port("query", "str")]  # an alias keeps its class's ports
    assert ir.edges == [seq(START, "Triage"), seq("Triage", END)]


def test_statement_style_and_annotated_builder() -> None:
    ir = extract(
        src(
            """
            g: Graph[S] = Graph(S)
            g.add(Classify)
            g.edge(START, "Classify")
            g.edge("Classify", END)
            app = g.compile()
            """
        )
    )
    assert (ir.name, ir.style) == ("app", "statement")
    assert ir.edges == [seq(START, "Classify"), seq("Classify", END)]
    assert extract(src("g = Graph(S)\ng.add(Tech)\n")).name == "g"


def test_conditional_with_mapping_expands_to_one_edge_per_target() -> None:
    ir = extract(
        src(
            """
            g = Graph(S).add(Classify).add(Billing).add(Tech)
            g.conditional("Classify", route, {"billing": "Billing", "tech": "Tech", "done": END})
            """
        )
    )
    assert ir.edges == [
        EdgeIR("Classify", "Billing", "conditional", path="route", label="billing"),
        EdgeIR("Classify", "Tech", "conditional", path="route", label="tech"),
        EdgeIR("Classify", END, "conditional", path="route", label="done"),
    ]
    assert all(e.branch == "conditional" for e in ir.edges)


def test_router_and_mapping_given_as_keyword_or_list() -> None:
    ir = extract(
        src(
            """
            g = Graph(S)
            g.router("Classify", path=lambda s: s.intent, mapping={"b": "Billing"})
            g.conditional("Billing", pick, ["Tech", END])
            """
        )
    )
    assert ir.edges == [
        EdgeIR("Classify", "Billing", "conditional", "lambda s: s.intent", "b", "router"),
        EdgeIR("Billing", "Tech", "conditional", "pick", "Tech", "conditional"),
        EdgeIR("Billing", END, "conditional", "pick", END, "conditional"),
    ]


def test_conditional_without_mapping_is_a_dynamic_stub() -> None:
    ir = extract(
        src(
            """
            g = Graph(S)
            g.conditional("Classify", route)
            g.router("Split", lambda s: [Send("Square", {"n": x}) for x in s.numbers])
            g.conditional("Tech", route, None)
            """
        )
    )
    assert ir.edges == [
        EdgeIR("Classify", None, "dynamic", path="route", branch="conditional"),
        EdgeIR(
            "Split",
            None,
            "dynamic",
            path='lambda s: [Send("Square", {"n": x}) for x in s.numbers]',
            branch="router",
        ),
        EdgeIR("Tech", None, "dynamic", path="route", branch="conditional"),
    ]


def test_loop_is_a_self_edge_plus_an_exit_edge() -> None:
    ir = extract(
        src(
            """
            g = Graph(S).add(Classify)
            g.edge(START, "Classify").loop("Classify", until=lambda s: s.score >= 0.9)
            g.loop("Billing", done, exit="Tech")
            """
        )
    )
    until = "lambda s: s.score >= 0.9"
    assert ir.edges == [
        seq(START, "Classify"),
        EdgeIR("Classify", "Classify", "conditional", until, "repeat", "loop"),
        EdgeIR("Classify", END, "conditional", until, "exit", "loop"),
        EdgeIR("Billing", "Billing", "conditional", "done", "repeat", "loop"),
        EdgeIR("Billing", "Tech", "conditional", "done", "exit", "loop"),
    ]


def test_rshift_surface_all_shapes() -> None:
    ir = extract(
        src(
            """
            g = Graph(S)
            classify, billing, tech = g.nodes(Classify, Billing, Tech)
            g.add(Classify, name="Triage")
            triage = g["Triage"]

            START >> classify >> triage
            triage >> Router(route, billing=billing, tech=tech, stop=END)
            billing >> [tech, g["Triage"]]
            [billing, tech] >> classify
            tech >> "Billing"
            billing >> END
            app = g.compile()
            """
        )
    )
    assert ir.style == "operator"
    assert [n.name for n in ir.nodes] == ["Classify", "Billing", "Tech", "Triage"]
    assert ir.edges == [
        seq(START, "Classify"),
        seq("Classify", "Triage"),
        EdgeIR("Triage", "Billing", "conditional", "route", "billing"),
        EdgeIR("Triage", "Tech", "conditional", "route", "tech"),
        EdgeIR("Triage", END, "conditional", "route", "stop"),
        seq("Billing", "Tech"),
        seq("Billing", "Triage"),
        EdgeIR(None, "Classify", "join", sources=["Billing", "Tech"]),  # [billing, tech] >>
        seq("Tech", "Billing"),
        seq("Billing", END),
    ]


def test_router_without_targets_is_dynamic_and_single_node_unpacking_works() -> None:
    ir = extract(
        src(
            """
            g = Graph(S)
            (split,) = g.nodes(Classify)
            split >> Router(fan_out)
            """
        )
    )
    assert ir.edges == [EdgeIR("Classify", None, "dynamic", path="fan_out")]


def test_unmodelled_wiring_becomes_custom_elements_verbatim() -> None:
    ir = extract(
        src(
            """
            g = Graph(S)
            g.add(Classify)
            g.edge(*pairs)
            for a, b in pairs:
                g.edge(a, b)
            g.edge(name_of(x), "Classify")
            g.conditional("Classify", route, MAPPING)
            g = g.add(Tech)
            h = (
                Graph(S)
                .add(Billing)
                .edge(*pair)
            )
            """
        ),
        graph="g",
    )
    assert [e.kind for e in ir.edges] == ["custom"] * 5
    assert [e.code for e in ir.edges] == [
        "g.edge(*pairs)",
        "for a, b in pairs:\n    g.edge(a, b)",
        'g.edge(name_of(x), "Classify")',
        'g.conditional("Classify", route, MAPPING)',
        "g = g.add(Tech)",
    ]
    chained = extract(src("h = Graph(S).add(Billing).edge(*pair).edge(START, 'Billing')\n"))
    assert chained.edges[0] == EdgeIR(None, None, "custom", code=".edge(*pair)")
    assert chained.edges[1] == seq(START, "Billing")


def test_unrelated_statements_are_not_wiring() -> None:
    ir = extract(
        src(
            """
            g = Graph(S)
            g.add(Classify)
            print(g)
            value = other >> 3
            app = g.compile()
            result = app.invoke({"query": "hi"})
            """
        )
    )
    assert ir.edges == []
    assert [n.name for n in ir.nodes] == ["Classify"]


def test_incomplete_code_is_fine() -> None:
    ir = extract("app = Graph(Undefined).add(Missing).edge(START, 'Missing').compile()\n")
    assert ir.nodes[0].name == "Missing"
    assert (ir.nodes[0].inputs, ir.nodes[0].has_hole, ir.nodes[0].line) == ([], False, None)
    assert ir.edges == [seq(START, "Missing")]


def test_several_graphs_are_each_addressable() -> None:
    source = src(
        """
        first = Graph(S).add(Classify).compile()
        g = Graph(T)
        g.add(Billing)
        second = g.compile()

        def build():
            return Graph(U).add(Tech)
        """
    )
    assert graph_names(source) == ["first", "second", "build"]
    assert extract(source).name == "first"
    assert extract(source, "g").name == "second"  # the builder variable also addresses it
    assert extract(source, "second").state == "T"
    assert extract(source, "build").nodes[0].name == "Tech"
    assert [ir.name for ir in extract_all(source)] == ["first", "second", "build"]
    with pytest.raises(GraphNotFoundError, match=r"'missing'.*'first', 'second', 'build'"):
        extract(source, "missing")


def test_graph_rebinding_stops_the_wiring() -> None:
    ir = extract(src("g = Graph(S)\ng.add(Classify)\ng = None\ng.add(Tech)\n"))
    assert [n.name for n in ir.nodes] == ["Classify"]


def test_no_graph_and_syntax_errors_say_what_to_do() -> None:
    with pytest.raises(GraphNotFoundError, match=r"add one, e\.g\. `g = Graph\(State\)`"):
        extract("x = 1\n")
    with pytest.raises(SourceParseError, match="line 1"):
        extract("def broken(:\n")


def test_node_subclass_of_a_node_class_and_attribute_bases() -> None:
    source = textwrap.dedent(
        """
        class Base(ts.Node):
            class In(ts.Schema):
                query: str

        class Child(Base):
            async def run(self, ctx, inp):
                raise ts.Hole("child")

        g = ts.Graph(S).add(Child).add(mod.Base)
        """
    )
    ir = extract(source)
    assert [(n.name, n.cls, n.has_hole) for n in ir.nodes] == [
        ("Child", "Child", True),
        ("Base", "mod.Base", False),
    ]


def test_dynamic_hole_message_keeps_its_source_text() -> None:
    source = "class A(Node):\n    async def run(self, ctx, inp):\n        raise Hole(f'{x}')\n"
    source += "g = Graph(S).add(A)\n"
    assert extract(source).nodes[0].hole == "f'{x}'"


def test_to_dict_is_json_ready() -> None:
    import json

    ir = extract(src("app = Graph(S).add(Billing).edge(START, 'Billing').compile()\n"))
    assert json.loads(json.dumps(ir.to_dict()))["edges"][0]["source"] == START


def test_graphs_sharing_a_variable_name_get_qualified_names() -> None:
    source = textwrap.dedent(
        """
        def first():
            g = Graph(S)
            g.add(A)
            return g

        def second():
            g = Graph(T)
            g.add(B)
            return g

        g = Graph(U)
        """
    )
    assert graph_names(source) == ["g", "second.g", "g@12"]
    assert extract(source, "second.g").state == "T"
    assert extract(source, "g@12").state == "U"
    from tensorsketch.canvas import edits, reconstruct

    edited = edits.add_edge(extract(source, "second.g"), "B", END)
    new = reconstruct(source, edited)
    assert extract(new, "second.g") == edited
    assert extract(new, "g") == extract(source, "g")


UNMODELLED = [
    'g.edge("A")',
    'g.edge("A", "B", "C")',
    'g.edge(src="A", bogus="B")',
    'g.entry("A", "B")',
    'g.edge(END, "A")',
    'g.edge("A", START)',
    "g.add()",
    "g.add(A, name=alias)",
    "g.add(factory()(x))",
    'g.add(A, "Positional")',
    "g.nodes(*classes)",
    "g.nodes(f(x)[0])",
    'g.conditional("A", f, {**base})',
    'g.conditional("A", f, {1: "A"})',
    'g.conditional("A", f, ["A", *rest])',
    'g.conditional("A", f, [pick(x)])',
    'g.conditional("A", f, {})',
    'g.conditional("A", f, {"a": "A", "a": "B"})',
    'g.conditional("A", f, {"a": START})',
    'g.conditional("A")',
    "g.conditional(END, f)",
    'g.loop("A")',
    "g.loop(START, until=f)",
    "a >> Router(f, x=b) >> c",
    "[a, b] >> Router(f, x=b)",
    "a >> START",
    "END >> a",
    "[a, b] >> [c, a]",
    "a >> [b, *rest]",
    "a >> [pick(x)]",
    "a >> Router(path=f)",
    "a >> Router(f, *xs)",
    "a >> Router(f, x=pick(y))",
    "a >> Router(f, x=START)",
    "for x in xs:\n    a >> x",
    "g.add(A).edge(*p)",
    "c, d = g.nodes(A)",
    "c, *d = g.nodes(A, B)",
]


@pytest.mark.parametrize("line", UNMODELLED)
def test_wiring_the_engine_cannot_model_is_kept_as_custom(line: str) -> None:
    source = f"g = Graph(S)\na, b = g.nodes(A, B)\n{line}\n"
    ir = extract(source)
    assert [e.kind for e in ir.edges] == ["custom"]
    assert ir.edges[0].code == line
    from tensorsketch.canvas import edits, reconstruct

    assert reconstruct(source, ir) == source
    edited = edits.add_edge(ir, "A", "B")
    assert extract(reconstruct(source, edited)) == edited


def test_more_modelled_shapes() -> None:
    source = textwrap.dedent(
        """
        g = Graph(S)
        [a, b] = g.nodes(A, B)
        h: Handle = g["A"]
        g.add(A, name="Z").edge("Z", END)
        print(g["A"])
        g.later()
        """
    )
    ir = extract(source)
    assert [n.name for n in ir.nodes] == ["A", "B", "Z"]
    assert ir.edges == [seq("Z", END)]


def test_compile_options_such_as_breakpoints_survive_an_edit() -> None:
    # compile(interrupt_before=..., interrupt_after=...) is the compiled graph's business:
    # the canvas reads the wiring around it and writes the call back untouched.
    source = src(
        "app = (\n"
        "    Graph(S).add(Classify).add(Billing).add(Tech)\n"
        '    .edge(START, "Classify").edge("Classify", "Billing")\n'
        '    .compile(interrupt_before=["Billing"], interrupt_after=["Classify"])\n'
        ")\n"
    )
    ir = extract(source)
    assert ir.name == "app" and [n.name for n in ir.nodes] == ["Classify", "Billing", "Tech"]
    edited = edits.add_edge(ir, "Billing", "Tech")
    out = reconstruct(source, edited)
    assert '.compile(interrupt_before=["Billing"], interrupt_after=["Classify"])' in out
    assert extract(out).edges == edited.edges


# -- subgraph nodes -------------------------------------------------------------------------


def test_a_subgraph_node_is_named_after_its_graph_with_the_shared_fields_as_ports() -> None:
    source = (Path(__file__).parent / "corpus" / "subgraph_styles.py").read_text()
    stmt = extract(source, "stmt")
    by_name = {n.name: n for n in stmt.nodes}
    assert list(by_name) == ["Dig", "Deep", "Write"]  # the graph's name=, then add(name=)
    for name in ("Dig", "Deep"):
        node = by_name[name]
        assert node.subgraph == "dig" and node.cls == "dig"
        assert [p.name for p in node.inputs] == ["topic", "notes"]  # not its private scratch
        assert [p.name for p in node.outputs] == ["topic", "notes"]
    assert {(e.source, e.target) for e in stmt.edges} >= {("Dig", "Deep"), ("Deep", "Write")}
    ops = extract(source, "ops")  # a bare `ops.nodes(dig)` too, its handle standing for "Dig"
    assert [n.name for n in ops.nodes] == ["Dig", "Write"] and ops.nodes[0].subgraph == "dig"
    assert [(e.source, e.target) for e in ops.edges] == [
        (START, "Dig"),
        ("Dig", "Write"),
        ("Write", END),
    ]
    assert reconstruct(source, ops) == source
    assert NodeIR.from_dict(stmt.nodes[0].to_dict()).subgraph == "dig"
