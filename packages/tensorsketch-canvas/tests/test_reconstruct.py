"""Write-back: only wiring changes, in the file's own style; everything else is byte-identical."""

from __future__ import annotations

import difflib
import textwrap

import pytest

from tensorsketch.canvas import (
    GraphNotFoundError,
    IRError,
    WriteBackError,
    edits,
    extract,
    reconstruct,
)
from tensorsketch.canvas.ir import END, START, EdgeIR, GraphIR, NodeIR, Port

HEADER = textwrap.dedent(
    '''\
    """A support router."""

    from tensorsketch import END, START, Context, Graph, Hole, Node, Router, Schema


    class Classify(Node):
        class In(Schema):
            query: str

        class Out(Schema):
            intent: str

        async def run(self, ctx: Context, inp: In) -> Out:
            # a comment inside a body
            return self.Out(intent="billing")


    class Billing(Node):
        class In(Schema):
            query: str

        class Out(Schema):
            answer: str

        async def run(self, ctx: Context, inp: In) -> Out:
            raise Hole("Answer billing questions")


    class Tech(Node):
        class In(Schema):  query: str
        class Out(Schema): answer: str

        async def run(self, ctx: Context, inp: In) -> Out:
            raise Hole("Answer tech questions")


    def route(state):  # unrelated code stays put
        return state.intent


    '''
)

FLUENT = HEADER + textwrap.dedent(
    """\
    app = (
        Graph(Support)
        .add(Classify).add(Billing).add(Tech)
        .edge(START, "Classify")  # entry
        # routing
        .conditional("Classify", route, {"billing": "Billing", "tech": "Tech"})
        .edge("Billing", END).edge("Tech", END)
    ).compile()
    """
)

STATEMENT = HEADER + textwrap.dedent(
    """\
    g = Graph(Support)
    g.add(Classify)
    g.add(Billing)
    g.add(Tech)
    g.entry("Classify")
    # routing
    g.conditional("Classify", route, {"billing": "Billing", "tech": "Tech"})  # mapped
    g.edge("Billing", END)
    g.edge("Tech", END)

    app = g.compile()
    """
)

OPERATOR = HEADER + textwrap.dedent(
    """\
    g = Graph(Support)
    classify, billing, tech = g.nodes(Classify, Billing, Tech)

    START >> classify  # entry
    classify >> Router(route, billing=billing, tech=tech)
    billing >> END
    tech >> END

    app = g.compile()
    """
)

SOURCES = {"fluent": FLUENT, "statement": STATEMENT, "operator": OPERATOR}


def wiring(source: str) -> str:
    """The part of a source after the shared header."""
    assert source.startswith(HEADER[: HEADER.index("class Classify")])
    return source[source.index("def route") :].split("\n\n\n", 1)[1]


def roundtrip(source: str, ir: GraphIR) -> str:
    new = reconstruct(source, ir)
    expected = ir.copy()
    expected.added = []
    assert extract(new) == expected
    assert reconstruct(new, extract(new)) == new
    return new


@pytest.mark.parametrize("style", sorted(SOURCES))
def test_a_no_op_returns_the_source_byte_identical(style: str) -> None:
    source = SOURCES[style]
    assert reconstruct(source, extract(source)) is source
    crlf = source.replace("\n", "\r\n")
    assert reconstruct(crlf, extract(crlf)) == crlf


def test_adding_an_edge_keeps_each_style() -> None:
    fluent = roundtrip(FLUENT, edits.add_edge(extract(FLUENT), "Billing", "Tech"))
    assert wiring(fluent) == textwrap.dedent(
        """\
        app = (
            Graph(Support)
            .add(Classify).add(Billing).add(Tech)
            .edge(START, "Classify")  # entry
            # routing
            .conditional("Classify", route, {"billing": "Billing", "tech": "Tech"})
            .edge("Billing", END).edge("Tech", END)
            .edge("Billing", "Tech")
        ).compile()
        """
    )
    statement = roundtrip(STATEMENT, edits.add_edge(extract(STATEMENT), "Billing", "Tech"))
    assert wiring(statement).endswith(
        'g.edge("Tech", END)\ng.edge("Billing", "Tech")\n\napp = g.compile()\n'
    )
    operator = roundtrip(OPERATOR, edits.add_edge(extract(OPERATOR), "Billing", "Tech"))
    assert wiring(operator).endswith("tech >> END\nbilling >> tech\n\napp = g.compile()\n")


@pytest.mark.parametrize("style", sorted(SOURCES))
def test_everything_but_the_wiring_is_untouched(style: str) -> None:
    source = SOURCES[style]
    new = roundtrip(source, edits.add_edge(extract(source), "Billing", "Tech"))
    head = source[: source.index("def route")]
    assert new.startswith(head)
    assert "    # a comment inside a body\n" in new


def test_removing_edges_and_mapping_targets() -> None:
    ir = extract(FLUENT)
    tech_route = next(i for i, e in enumerate(ir.edges) if e.label == "tech")
    new = roundtrip(FLUENT, edits.remove_edge(ir, tech_route))
    assert '.conditional("Classify", route, {"billing": "Billing"})' in new
    ir = extract(new)
    billing_route = next(i for i, e in enumerate(ir.edges) if e.label == "billing")
    new = roundtrip(new, edits.remove_edge(ir, billing_route))
    assert ".conditional(" not in new
    assert "# routing" not in new  # the comment belonged to the removed link


@pytest.mark.parametrize("style", sorted(SOURCES))
def test_removing_a_node_removes_its_wiring_but_not_its_class(style: str) -> None:
    source = SOURCES[style]
    new = roundtrip(source, edits.remove_node(extract(source), "Tech"))
    assert "class Tech(Node):" in new
    ir = extract(new)
    assert [n.name for n in ir.nodes] == ["Classify", "Billing"]
    assert all("Tech" not in (e.source, e.target) for e in ir.edges)


def test_removing_a_node_from_a_nodes_call_keeps_the_other_handles() -> None:
    new = roundtrip(OPERATOR, edits.remove_node(extract(OPERATOR), "Billing"))
    assert "classify, tech = g.nodes(Classify, Tech)" in new
    assert "classify >> Router(route, tech=tech)" in new


@pytest.mark.parametrize("style", sorted(SOURCES))
def test_renaming_a_node_sets_the_alias_and_updates_references(style: str) -> None:
    source = SOURCES[style]
    new = roundtrip(source, edits.rename_node(extract(source), "Classify", "Triage"))
    if style == "operator":  # the entry names its node in place: g.nodes(("Triage", Classify), ...)
        assert 'g.nodes(("Triage", Classify), Billing, Tech)' in new
    else:
        assert 'add(Classify, name="Triage")' in new
    assert "class Classify(Node):" in new  # the class keeps its name
    ir = extract(new)
    assert ir.edges[0] == EdgeIR(START, "Triage")
    assert ir.edges[1].source == "Triage"
    back = roundtrip(new, edits.rename_node(ir, "Triage", "Classify"))
    assert 'name="Classify"' not in back and "name=" not in wiring(back)


def test_rename_inherits_comments_of_the_lines_it_replaces() -> None:
    new = roundtrip(STATEMENT, edits.rename_node(extract(STATEMENT), "Classify", "Triage"))
    assert (
        '# routing\ng.conditional("Triage", route, {"billing": "Billing", "tech": "Tech"})  # mapped'
        in new
    )
    new = roundtrip(OPERATOR, edits.rename_node(extract(OPERATOR), "Classify", "Triage"))
    # in the >> style the node keeps its handle, so every >> line stays as written
    assert "START >> classify  # entry\n" in new
    assert 'classify, billing, tech = g.nodes(("Triage", Classify), Billing, Tech)\n' in new
    assert wiring(new).count(">>") == wiring(OPERATOR).count(">>")


@pytest.mark.parametrize("old", ["Parse", "Answer", "Check"])
def test_a_rename_in_a_nodes_tuple_is_one_small_diff(old: str) -> None:
    """#41: renaming a node of ``g.nodes(...)`` touched every ``>>`` line that used it (a new
    handle) and re-chained them, then split the tuple into three statements; now the one
    line of the tuple changes (the entry becomes ``("Reply", Class)``), and renaming back
    gives the file back byte for byte."""
    source = (
        "from tensorsketch import END, START, Graph\n"
        "g = Graph(S)\n"
        "parse, answer, check = g.nodes(Parse, Answer, Check)\n"
        "START >> parse >> answer  # the main path\n"
        "answer >> check >> END\n"
        "app = g.compile()\n"
    )
    new = roundtrip(source, edits.rename_node(extract(source), old, "Reply"))
    changed = [
        line for line in difflib.ndiff(source.splitlines(), new.splitlines()) if line[:1] in "+-"
    ]
    var = old.lower()
    removed = [line[2:] for line in changed if line[0] == "-"]
    added = [line[2:] for line in changed if line[0] == "+"]
    assert removed == ["parse, answer, check = g.nodes(Parse, Answer, Check)"]
    entries = ", ".join(f'("Reply", {n})' if n == old else n for n in ("Parse", "Answer", "Check"))
    assert added == [f"parse, answer, check = g.nodes({entries})"]
    assert var in added[0].split(" = ")[0]  # the handle stays: no >> line changes
    back = roundtrip(new, edits.rename_node(extract(new), "Reply", old))
    assert back == source


@pytest.mark.parametrize("style", sorted(SOURCES))
def test_creating_a_node_writes_a_typed_stub_above_the_builder(style: str) -> None:
    source = SOURCES[style]
    ir = edits.add_node(
        extract(source), "Escalate", [Port("query", "str")], [Port("ticket", "str")]
    )
    new = roundtrip(source, ir)
    stub = textwrap.dedent(
        """\
        class Escalate(Node):
            class In(Schema):
                query: str

            class Out(Schema):
                ticket: str

            async def run(self, ctx: Context, inp: In) -> Out:
                raise Hole("Escalate needs code")


        """
    )
    builder = "app = (" if style == "fluent" else "g = Graph(Support)"
    assert stub + builder in new
    node = extract(new).node("Escalate")
    assert node == ir.node("Escalate")
    assert (node.has_hole, node.hole) == (True, "Escalate needs code")


def test_a_stub_adds_missing_names_to_the_tensorsketch_import() -> None:
    source = FLUENT.replace(
        "from tensorsketch import END, START, Context, Graph, Hole, Node, Router, Schema",
        "from tensorsketch import END, START, Graph, Node, Schema",
    )
    new = roundtrip(source, edits.add_node(extract(source), "Escalate"))
    assert "from tensorsketch import END, START, Context, Graph, Hole, Node, Schema\n" in new
    unsorted = FLUENT.replace(
        "from tensorsketch import END, START, Context, Graph, Hole, Node, Router, Schema",
        "from tensorsketch import Schema, Node, Graph, Context, START, END",
    )
    new = roundtrip(unsorted, edits.add_node(extract(unsorted), "Escalate"))
    assert "from tensorsketch import Schema, Node, Graph, Context, START, END, Hole\n" in new


def test_a_stub_without_a_tensorsketch_import_gets_one_after_the_imports() -> None:
    source = "import os\n\napp = Graph(S).add(A).compile()\n"
    new = roundtrip(source, edits.add_node(extract(source), "Escalate"))
    assert new.startswith("import os\nfrom tensorsketch import Context, Hole, Node, Schema\n")
    assert "class Escalate(Node):\n    class In(Schema):\n        pass\n" in new


def test_multiline_import_keeps_its_layout() -> None:
    source = textwrap.dedent(
        """\
        from tensorsketch import (
            Graph,
            Node,
        )

        g = Graph(S)
        g.add(A)
        """
    )
    new = roundtrip(source, edits.add_edge(extract(source), START, "A"))
    assert new.startswith("from tensorsketch import (\n    START,\n    Graph,\n    Node,\n)\n")


def test_ports_change_only_on_hole_nodes() -> None:
    ir = edits.set_ports(
        extract(FLUENT), "Billing", [Port("query", "str"), Port("history", "list[str]")]
    )
    new = roundtrip(FLUENT, ir)
    assert "    class In(Schema):\n        query: str\n        history: list[str]\n" in new
    ir = edits.set_ports(extract(new), "Tech", outputs=[])
    new = roundtrip(new, ir)
    assert "    class Out(Schema):\n        pass\n" in new
    assert "    class In(Schema):  query: str\n" in new  # the untouched side keeps its form
    with pytest.raises(IRError, match="already has a body"):
        edits.set_ports(extract(new), "Classify", [])
    bad = extract(new)
    bad.node("Classify").inputs = []
    with pytest.raises(WriteBackError, match=r"edit `Classify.In`/`Classify.Out` in code"):
        reconstruct(new, bad)


def test_the_canvas_never_edits_bodies_state_or_foreign_classes() -> None:
    ir = extract(FLUENT)
    ir.node("Billing").has_hole = False
    with pytest.raises(WriteBackError, match="never edits"):
        reconstruct(FLUENT, ir)
    ir = extract(FLUENT)
    ir.state = "Other"
    with pytest.raises(WriteBackError, match="state schema"):
        reconstruct(FLUENT, ir)
    ir = extract(FLUENT)
    ir.nodes.append(NodeIR("Remote", inputs=[Port("x", "int")]))
    with pytest.raises(WriteBackError, match="not defined in this file"):
        reconstruct(FLUENT, ir)


def test_adding_an_existing_class_wires_it_without_a_stub() -> None:
    ir = extract(FLUENT)
    ir.nodes.append(
        NodeIR(
            "Audit",
            cls="Tech",
            inputs=[Port("query", "str")],
            outputs=[Port("answer", "str")],
            has_hole=True,
            hole="Answer tech questions",
        )
    )
    new = roundtrip(FLUENT, ir)
    assert '.add(Tech, name="Audit")' in new
    assert new.count("class Tech(") == 1


def test_custom_elements_survive_edits_and_can_be_deleted() -> None:
    source = textwrap.dedent(
        """\
        g = Graph(S)
        g.add(A)
        g.add(B)
        g.edge(*PAIR)
        for a, b in PAIRS:
            g.edge(a, b)
        g.edge("A", "B")
        """
    )
    ir = extract(source)
    new = roundtrip(source, edits.add_edge(ir, "B", END))
    assert "g.edge(*PAIR)\nfor a, b in PAIRS:\n    g.edge(a, b)\n" in new
    new = roundtrip(new, edits.remove_edge(extract(new), 0))
    assert "g.edge(*PAIR)" not in new and "for a, b in PAIRS" in new


def test_single_line_chains_stay_on_one_line_until_they_are_too_long() -> None:
    source = 'app = Graph(S).add(A).add(B).edge(START, "A").compile()\n'
    new = roundtrip(source, edits.add_edge(extract(source), "A", "B"))
    assert new == 'app = Graph(S).add(A).add(B).edge(START, "A").edge("A", "B").compile()\n'
    ir = extract(new)
    for target in ("Alpha", "Bravo", "Charlie"):
        ir.nodes.append(NodeIR(target))
    new = roundtrip(new, ir)
    assert new.startswith("app = (\n    Graph(S)\n    .add(A)\n")
    assert new.endswith(
        '    .add(Charlie)\n    .edge(START, "A")\n    .edge("A", "B")\n).compile()\n'
    )


def test_the_file_quote_style_is_kept() -> None:
    source = "g = Graph(S)\ng.add(A)\ng.edge(START, 'A')\n"
    new = roundtrip(source, edits.add_edge(extract(source), "A", END))
    assert new.endswith("g.edge('A', END)\n")


def test_graphs_in_functions_get_module_level_stubs() -> None:
    source = textwrap.dedent(
        """\
        from tensorsketch import Graph, Node, Schema, Context, Hole


        def build():
            g = Graph(S)
            g.add(A)
            return g.compile()
        """
    )
    ir = edits.add_edge(edits.add_node(extract(source), "Escalate"), "A", "Escalate")
    new = roundtrip(source, ir)
    assert new.index("class Escalate(Node):") < new.index("def build():")
    assert '    g.add(Escalate)\n    g.edge("A", "Escalate")\n    return g.compile()\n' in new


def test_only_the_named_graph_is_rewritten() -> None:
    source = "first = Graph(S).add(A).compile()\nsecond = Graph(T).add(B).compile()\n"
    ir = edits.add_edge(extract(source, "second"), "B", END)
    new = roundtrip_named(source, ir)
    assert new.startswith("from tensorsketch import END\nfirst = Graph(S).add(A).compile()\n")
    with pytest.raises(GraphNotFoundError):
        reconstruct(source, GraphIR(name="third"))


def roundtrip_named(source: str, ir: GraphIR) -> str:
    new = reconstruct(source, ir)
    assert extract(new, ir.name) == ir
    return new


def test_invalid_irs_are_refused_with_a_reason() -> None:
    ir = extract(FLUENT)
    ir.nodes.append(NodeIR("Billing"))
    with pytest.raises(IRError, match="several nodes named 'Billing'"):
        reconstruct(FLUENT, ir)
    ir = extract(FLUENT)
    ir.added.append("Ghost")
    with pytest.raises(IRError, match="no node of that name"):
        reconstruct(FLUENT, ir)
    ir = extract(FLUENT)
    ir.edges.append(EdgeIR("Billing", "Billing", "conditional", "done", "repeat", "loop"))
    with pytest.raises(IRError, match="add or remove both together"):
        reconstruct(FLUENT, ir)
    ir = extract(FLUENT)
    ir.edges.append(EdgeIR("Billing", "Tech", "dynamic", path="route"))
    with pytest.raises(IRError, match="no target"):
        reconstruct(FLUENT, ir)
    ir = extract(FLUENT)
    ir.edges.append(EdgeIR("Billing", "Tech", "conditional", path="route"))
    with pytest.raises(IRError, match="mapping key"):
        reconstruct(FLUENT, ir)
    ir = extract(FLUENT)
    ir.edges.append(EdgeIR(None, None, "custom"))
    with pytest.raises(IRError, match="without code"):
        reconstruct(FLUENT, ir)
    ir = extract(FLUENT)
    ir.nodes.append(NodeIR("my node", has_hole=True))
    ir.added.append("my node")
    with pytest.raises(WriteBackError, match="must be a Python identifier"):
        reconstruct(FLUENT, ir)
    ir = edits.add_node(extract(FLUENT), "Escalate", [Port("bad name", "str")])
    with pytest.raises(WriteBackError, match="not a Python identifier"):
        reconstruct(FLUENT, ir)
    ir = edits.add_node(extract(FLUENT), "Escalate", [Port("name", "list[")])
    with pytest.raises(WriteBackError, match="not a Python expression"):
        reconstruct(FLUENT, ir)


def test_new_branches_render_in_each_style() -> None:
    for style, source in SOURCES.items():
        ir = extract(source)
        ir.edges = [e for e in ir.edges if e.source != "Billing"]
        ir.edges += [
            EdgeIR("Billing", "Billing", "conditional", "lambda s: s.done", "repeat", "loop"),
            EdgeIR("Billing", "Tech", "conditional", "lambda s: s.done", "exit", "loop"),
            EdgeIR("Tech", None, "dynamic", path="fan_out", branch="router"),
        ]
        new = roundtrip(source, ir)
        prefix = "." if style == "fluent" else "g."
        assert f'{prefix}loop("Billing", until=lambda s: s.done, exit="Tech")' in new
        assert f'{prefix}router("Tech", fan_out)' in new


def test_operator_style_falls_back_to_calls_when_router_cannot_say_it() -> None:
    ir = extract(OPERATOR)
    ir.edges.append(EdgeIR("Tech", "Billing", "conditional", "pick", "needs-review"))
    ir.edges.append(EdgeIR(START, END))
    new = roundtrip(OPERATOR, ir)
    assert 'g.conditional("Tech", pick, {"needs-review": "Billing"})' in new
    assert "g.edge(START, END)" in new


def test_a_write_back_that_would_not_round_trip_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tensorsketch.canvas import _reconstruct

    monkeypatch.setattr(_reconstruct._Writer, "write", lambda self: FLUENT)
    with pytest.raises(WriteBackError, match="left unchanged"):
        reconstruct(FLUENT, edits.add_edge(extract(FLUENT), "Billing", "Tech"))


def test_without_the_ast_pre_pass_everything_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorsketch.canvas import _source

    def refuse(*args: object, **kwargs: object) -> None:
        raise SyntaxError("pretend this Python is too old for the file")

    monkeypatch.setattr(_source, "parse_python", refuse)
    for source in SOURCES.values():
        ir = extract(source)
        assert ir.nodes[0].line is not None
        roundtrip(source, edits.rename_node(edits.add_edge(ir, "Billing", "Tech"), "Tech", "Tk"))


def test_creating_a_node_whose_class_exists_wires_the_existing_class() -> None:
    ir = edits.remove_node(extract(FLUENT), "Tech")
    ir = edits.add_node(ir, "Tech", [Port("ignored", "int")])  # the canvas does not know its ports
    new = reconstruct(FLUENT, ir)
    assert new.count("class Tech(") == 1
    node = extract(new).node("Tech")
    assert (node.inputs, node.hole) == ([Port("query", "str")], "Answer tech questions")


def test_a_created_node_of_an_existing_class_follows_port_edits_to_that_class() -> None:
    # Found by the canvas soak: the new node took the class's ports from the file while a
    # sibling of the same class changed them in the same write-back, so it read back wrong.
    ports = [Port("query", "str"), Port("lang", "str")]
    ir = edits.set_ports(extract(FLUENT), "Billing", ports, None)
    ir.nodes.append(NodeIR("Billing2", cls="Billing"))  # placed from the palette
    ir.added.append("Billing2")
    new = reconstruct(FLUENT, ir)
    assert [n.inputs for n in extract(new).nodes if n.cls == "Billing"] == [ports, ports]


def test_a_new_node_cannot_take_a_name_the_file_already_uses() -> None:
    with pytest.raises(WriteBackError, match=r"'route'.*not a node class"):
        reconstruct(FLUENT, edits.add_node(extract(FLUENT), "route"))


ODD_LAYOUTS = [
    "app = ((Graph(S)).add(A).add(B)).compile()\n",
    "app = (Graph(S).add(A)\n       .add(B)).compile()\n",
    "app = Graph(S).add(A) \\\n    .add(B).compile()\n",
    "def build():\n    return (\n        Graph(S)\n        .add(A)\n        .add(B)\n    )\n",
    'g = Graph(S).add(A)\ng.add(B).edge(START, "A")\n',
    "g = (\n    Graph(S)\n    .add(A)  # first\n    # about B\n    .add(B)\n)\n",
    "x = 1\nif True:\n    g = Graph(S)\n    g.add(A)\n    g.add(B)\n",
    "app = (\n    Graph(S)\n    .add(A)\n    .add(B)\n    .compile()\n)\n",
]


@pytest.mark.parametrize("source", ODD_LAYOUTS)
def test_odd_layouts_survive_every_kind_of_edit(source: str) -> None:
    ir = extract(source)
    assert reconstruct(source, ir) == source
    for edit in (
        lambda ir: edits.add_edge(ir, "A", "B"),
        lambda ir: edits.remove_node(ir, "A"),
        lambda ir: edits.remove_node(ir, "B"),
        lambda ir: edits.rename_node(ir, "B", "Bee"),
        lambda ir: edits.add_node(ir, "Cee"),
    ):
        roundtrip(source, edit(ir))


def test_a_closing_parenthesis_stays_before_compile() -> None:
    source = "app = (Graph(S).add(A)\n       .add(B)).compile()\n"
    new = roundtrip(source, edits.remove_node(extract(source), "B"))
    assert new == "app = (Graph(S).add(A)).compile()\n"
    new = roundtrip(source, edits.add_edge(extract(source), "A", "B"))
    assert new == 'app = (Graph(S).add(A)\n       .add(B)\n       .edge("A", "B")).compile()\n'


def test_stubs_are_separated_from_the_builder_by_two_blank_lines() -> None:
    source = "app = Graph(S).add(A).compile()\n"
    new = roundtrip(source, edits.add_node(extract(source), "Cee"))
    assert '        raise Hole("Cee needs code")\n\n\napp = (' in new or (
        '        raise Hole("Cee needs code")\n\n\napp = Graph(S)' in new
    )


@pytest.mark.parametrize("style", sorted(SOURCES))
def test_reordered_and_prepended_edges_follow_the_ir_order(style: str) -> None:
    source = SOURCES[style]
    ir = extract(source)
    ir.edges = [ir.edges[-1], *ir.edges[:-1]]  # move the last edge to the front
    new = roundtrip(source, ir)
    ir = extract(new)
    ir.edges.insert(0, EdgeIR("Tech", "Billing"))
    roundtrip(new, ir)


def test_an_empty_builder_grows_links_in_order() -> None:
    source = "app = Graph(S).compile()\n"
    ir = extract(source)
    ir.nodes += [NodeIR("A"), NodeIR("B")]
    ir.edges += [EdgeIR(START, "A"), EdgeIR("A", "B")]
    new = roundtrip(source, ir)
    assert new == (
        "from tensorsketch import START\n"
        'app = Graph(S).add(A).add(B).edge(START, "A").edge("A", "B").compile()\n'
    )


def test_a_statement_chain_that_loses_every_link_is_removed() -> None:
    source = "g = Graph(S)\ng.add(A).add(B)\ng.edge(START, 'A')\n"
    ir = extract(source)
    ir.nodes = []
    new = roundtrip(source, ir)
    assert new == "g = Graph(S)\ng.edge(START, 'A')\n"
    ir = extract(source)
    ir.nodes = ir.nodes[:1]
    assert roundtrip(source, ir) == "g = Graph(S)\ng.add(A)\ng.edge(START, 'A')\n"


def test_custom_code_from_the_ir_is_written_verbatim() -> None:
    statement = "g = Graph(S)\ng.add(A)\n"
    ir = extract(statement)
    ir.edges.append(EdgeIR(None, None, "custom", code="g.edge(*PAIR)"))
    assert roundtrip(statement, ir).endswith("g.add(A)\ng.edge(*PAIR)\n")
    fluent = "app = Graph(S).add(A).compile()\n"
    ir = extract(fluent)
    ir.edges.append(EdgeIR(None, None, "custom", code=".edge(*PAIR)"))
    assert roundtrip(fluent, ir) == "app = Graph(S).add(A).edge(*PAIR).compile()\n"


def test_new_handles_avoid_names_the_file_uses() -> None:
    source = textwrap.dedent(
        """\
        def classify(x):
            return x


        g = Graph(S)
        (a,) = g.nodes(A)
        g.add(B)
        """
    )
    ir = extract(source)
    ir = edits.add_edge(edits.add_node(ir, "Classify"), "Classify", "A")
    ir = edits.add_edge(edits.add_node(ir, "If"), "If", END)
    ir = edits.add_edge(ir, "B", "A")
    new = roundtrip(source, ir)
    assert "classify_node >> a\n" in new
    assert "if_node >> END\n" in new
    assert 'g["B"] >> a\n' in new


def test_ports_added_to_a_hole_without_in_or_out_classes() -> None:
    source = textwrap.dedent(
        """\
        class Draft(Node):
            async def run(self, ctx, inp):
                raise Hole("write the draft")


        g = Graph(S)
        g.add(Draft)
        """
    )
    ir = edits.set_ports(extract(source), "Draft", [Port("topic", "str")], [Port("draft", "str")])
    new = roundtrip(source, ir)
    assert new.startswith(
        "class Draft(Node):\n    class In(Schema):\n        topic: str\n\n"
        "    class Out(Schema):\n        draft: str\n\n    async def run(self, ctx, inp):\n"
    )


def test_more_invalid_irs() -> None:
    source = "g = Graph(S)\ng.add(A)\n"
    for edge, message in (
        (EdgeIR(None, "A"), "needs a source node"),
        (EdgeIR("A", None), "needs a target"),
        (EdgeIR("A", "A", "conditional", None, "repeat", "loop"), "`until` predicate"),
    ):
        ir = extract(source)
        ir.edges.append(edge)
        if edge.branch == "loop":
            ir.edges.append(EdgeIR("A", END, "conditional", None, "exit", "loop"))
        with pytest.raises(IRError, match=message):
            reconstruct(source, ir)
    ir = extract(source)
    ir.nodes.append(NodeIR(START))
    with pytest.raises(IRError, match="reserved"):
        reconstruct(source, ir)
    ir = extract(source)
    ir.nodes += [
        NodeIR("X", cls="New", has_hole=True),
        NodeIR("Y", cls="New", inputs=[Port("a", "int")], has_hole=True),
    ]
    ir.added += ["X", "Y"]
    with pytest.raises(WriteBackError, match="share class 'New'"):
        reconstruct(source, ir)
    ir = extract(source)
    ir.nodes.append(NodeIR("X", cls="New"))
    ir.added.append("X")
    with pytest.raises(WriteBackError, match="must be created as a hole"):
        reconstruct(source, ir)


def test_a_key_added_to_a_routing_call_stays_in_that_call() -> None:
    """A node routes through one path function: a key put back (the Studio's undo of deleting
    a route) joins the existing call, with its comments, rather than becoming a second call."""
    source = (
        "from tensorsketch import END, START, Graph\n\n"
        "app = (\n    Graph(S)\n    .add(A)\n    .add(B)\n    .edge(START, 'A')\n"
        "    # route by intent\n    .conditional('A', pick, {'b': 'B', 'end': END})\n"
        "    .edge('B', END)\n).compile()\n"
    )
    ir = extract(source)
    done = next(i for i, e in enumerate(ir.edges) if e.label == "end")
    removed = reconstruct(source, edits.remove_edge(ir, done))
    assert ".conditional('A', pick, {'b': 'B'})" in removed
    assert reconstruct(removed, ir) == source


def with_breakpoints(source: str, arguments: str) -> str:
    return source.replace(".compile()", f".compile({arguments})")


@pytest.mark.parametrize("style", sorted(SOURCES))
def test_renaming_a_node_renames_it_in_the_compile_breakpoints(style: str) -> None:
    source = with_breakpoints(
        SOURCES[style], "interrupt_before=['Classify', 'Tech'], interrupt_after=(\"Classify\",)"
    )
    ir = edits.rename_node(extract(source), "Classify", "Triage")
    assert (ir.interrupt_before, ir.interrupt_after) == (["Triage", "Tech"], ["Triage"])
    new = roundtrip(source, ir)
    # Each string keeps its quotes; the rest of the call is as written.
    assert "compile(interrupt_before=['Triage', 'Tech'], interrupt_after=(\"Triage\",))" in new
    assert extract(new).interrupt_before == ["Triage", "Tech"]
    back = roundtrip(new, edits.rename_node(extract(new), "Triage", "Classify"))
    assert "interrupt_before=['Classify', 'Tech'], interrupt_after=(\"Classify\",)" in back


@pytest.mark.parametrize("style", sorted(SOURCES))
def test_removing_a_node_takes_it_out_of_the_compile_breakpoints(style: str) -> None:
    source = with_breakpoints(
        SOURCES[style],
        '\n    interrupt_before=["Tech", "Billing"],  # stops\n'
        '    interrupt_after=("Tech",),\n    max_concurrency=4,\n',
    )
    ir = edits.remove_node(extract(source), "Tech")
    assert (ir.interrupt_before, ir.interrupt_after) == (["Billing"], [])
    new = roundtrip(source, ir)
    assert 'interrupt_before=["Billing"],  # stops\n' in new
    assert "interrupt_after=()," in new and "max_concurrency=4," in new
    new = roundtrip(new, edits.remove_node(extract(new), "Billing"))
    assert "interrupt_before=[],  # stops" in new


def test_a_one_name_tuple_left_after_a_removal_keeps_its_comma() -> None:
    source = with_breakpoints(FLUENT, 'interrupt_before=("Tech", "Billing")')
    new = roundtrip(source, edits.remove_node(extract(source), "Tech"))
    assert 'compile(interrupt_before=("Billing",))' in new


def test_breakpoints_the_canvas_cannot_read_are_left_as_written() -> None:
    source = with_breakpoints(STATEMENT, "interrupt_before=STOPS")
    assert extract(source).interrupt_before is None
    new = roundtrip(source, edits.rename_node(extract(source), "Classify", "Triage"))
    assert "app = g.compile(interrupt_before=STOPS)" in new


@pytest.mark.parametrize("style", sorted(SOURCES))
def test_a_renamed_node_keeps_its_retry_and_timeout(style: str) -> None:
    source = SOURCES[style]
    if style == "operator":
        source = source.replace(
            "classify, billing, tech = g.nodes(Classify, Billing, Tech)",
            "g.add(Classify, retry=RetryPolicy(max_attempts=3), timeout=2.5)\n"
            'classify = g["Classify"]\nbilling, tech = g.nodes(Billing, Tech)',
        )
    else:
        source = source.replace(
            "add(Classify)", "add(Classify, retry=RetryPolicy(max_attempts=3), timeout=2.5)"
        )
    ir = extract(source)
    assert (ir.nodes[0].retry, ir.nodes[0].timeout) == ("RetryPolicy(max_attempts=3)", "2.5")
    new = roundtrip(source, edits.rename_node(ir, "Classify", "Triage"))
    assert 'add(Classify, name="Triage", retry=RetryPolicy(max_attempts=3), timeout=2.5)' in new
    node = extract(new).node("Triage")
    assert (node.retry, node.timeout) == ("RetryPolicy(max_attempts=3)", "2.5")
    back = roundtrip(new, edits.rename_node(extract(new), "Triage", "Classify"))
    assert "add(Classify, retry=RetryPolicy(max_attempts=3), timeout=2.5)" in back
