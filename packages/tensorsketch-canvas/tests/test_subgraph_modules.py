"""#42: a subgraph defined in another module, and the decomposed agent loop, on the canvas.

``add(research_app)`` with ``research_app`` imported is read from the module that defines it —
parsed, never imported — and nested in the node; an edit inside it is written to that file;
a module that cannot be found or parsed is an opaque subgraph box with a reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.canvas import edits, extract, reconstruct
from tensorsketch.canvas.ir import END, START, GraphIR, NodeIR

RESEARCH = """\
from tensorsketch import END, START, Graph, Node, Schema


class Research(Schema):
    question: str
    notes: list[str] = []
    draft: str = ""  # private


class Search(Node):
    class In(Schema):
        question: str

    class Out(Schema):
        notes: list[str]


class Check(Node):
    class In(Schema):
        notes: list[str]

    class Out(Schema):
        notes: list[str]


research = Graph(Research, name="Research")
research.add(Search)
research.add(Check)
research.edge(START, "Search")
research.edge("Search", "Check")  # keep this comment
research.edge("Check", END)
research_app = research.compile()
"""

REPORT_HEAD = """\
from tensorsketch import END, START, Graph, Node, Schema
{imports}


class Report(Schema):
    question: str
    notes: list[str] = []
    answer: str = ""


class Write(Node):
    class In(Schema):
        notes: list[str]

    class Out(Schema):
        answer: str


app = Graph(Report).add({child}).add(Write)
app.edge(START, "Research").edge("Research", "Write").edge("Write", END)
"""


def _project(tmp_path: Path, imports: str, child: str, where: str = "myapp/report.py") -> Path:
    (tmp_path / "myapp").mkdir(exist_ok=True)
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "research.py").write_text(RESEARCH)
    report = tmp_path / where
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(REPORT_HEAD.format(imports=imports, child=child))
    return report


def _read(report: Path, root: Path) -> GraphIR:
    return extract(report.read_text(), path=report, root=root)


@pytest.mark.parametrize(
    ("imports", "child"),
    [
        ("from myapp.research import research_app", "research_app"),
        ("from myapp.research import research_app as dig", "dig"),
        ("import myapp.research as r", "r.research_app"),
        ("import myapp.research", "myapp.research.research_app"),
        ("from myapp import research", "research.research_app"),
        ("from .research import research_app", "research_app"),
        ("from . import research", "research.research_app"),
        ("from myapp.research import research", "research"),  # the builder works too
    ],
)
def test_an_imported_subgraph_is_read_from_the_module_that_defines_it(
    tmp_path: Path, imports: str, child: str
) -> None:
    report = _project(tmp_path, imports, child)
    ir = _read(report, tmp_path)
    node = ir.node("Research")
    assert [n.name for n in ir.nodes] == ["Research", "Write"]
    assert node.cls == child and node.subgraph in ("research_app", "research")
    assert node.subgraph_file == "myapp/research.py" and node.subgraph_error is None
    # its ports are the fields both states share (`draft` stays inside)
    assert [(p.name, p.type) for p in node.inputs] == [("question", "str"), ("notes", "list[str]")]
    assert node.outputs == node.inputs
    # the IR nests the child, read from its own file
    assert node.child is not None and node.child.name == node.subgraph
    assert [n.name for n in node.child.nodes] == ["Search", "Check"]
    assert node.child.node("Search").line is not None
    assert NodeIR.from_dict(node.to_dict()) == node
    assert NodeIR.from_dict(node.to_dict()).child == node.child
    # a no-op projection leaves the file byte-identical
    text = report.read_text()
    assert reconstruct(text, ir, path=report, root=tmp_path) == text


def test_a_re_export_through_a_package_init_is_followed(tmp_path: Path) -> None:
    report = _project(tmp_path, "from myapp import research_app", "research_app", "main.py")
    (tmp_path / "myapp" / "__init__.py").write_text("from .research import research_app\n")
    node = _read(report, tmp_path).node("Research")
    assert node.subgraph_file == "myapp/research.py" and node.child is not None


def test_a_script_imports_a_sibling_module_as_python_would(tmp_path: Path) -> None:
    """``python examples/report.py`` puts ``examples/`` first on ``sys.path``."""
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "research.py").write_text(RESEARCH)
    report = tmp_path / "examples" / "report.py"
    report.write_text(
        REPORT_HEAD.format(imports="from research import research_app", child="research_app")
    )
    node = _read(report, tmp_path).node("Research")
    assert node.subgraph_file == "examples/research.py"


@pytest.mark.parametrize(
    ("imports", "child", "reason"),
    [
        (
            "from myapp.missing import research_app",
            "research_app",
            "cannot find module 'myapp.missing'",
        ),
        ("from .gone import research_app", "research_app", "cannot find module '.gone'"),
        (
            "from myapp.broken import research_app",
            "research_app",
            "myapp/broken.py: does not parse",
        ),
        (
            "from myapp.research import nothing_here",
            "nothing_here",
            "myapp/research.py defines no 'nothing_here'",
        ),
        (
            "from myapp.built import research_app",
            "research_app",
            "is not a `Graph(...)` the canvas can read",
        ),
    ],
)
def test_a_module_that_cannot_be_read_is_an_opaque_subgraph_box_with_a_reason(
    tmp_path: Path, imports: str, child: str, reason: str
) -> None:
    report = _project(tmp_path, imports, child)
    (tmp_path / "myapp" / "broken.py").write_text("research_app = (\n")
    (tmp_path / "myapp" / "built.py").write_text("research_app = make_graph()\nmake_graph = None\n")
    ir = _read(report, tmp_path)
    node = ir.nodes[0]
    assert node.name == child and node.subgraph == child and node.child is None
    assert node.subgraph_error is not None and reason in node.subgraph_error, node.subgraph_error
    assert not node.inputs and not node.outputs
    text = report.read_text()
    assert reconstruct(text, ir, path=report, root=tmp_path) == text
    # the rest of the graph is still edited as usual
    renamed = reconstruct(
        text, edits.rename_node(ir, "Write", "Compose"), path=report, root=tmp_path
    )
    assert '.add(Write, name="Compose")' in renamed


def test_a_library_import_and_an_imported_node_class_stay_plain_nodes(tmp_path: Path) -> None:
    report = _project(tmp_path, "from somelib import research_app", "research_app")
    assert _read(report, tmp_path).nodes[0].subgraph is None
    report = _project(tmp_path, "from myapp.research import Search", "Search")
    node = _read(report, tmp_path).nodes[0]
    assert (node.name, node.subgraph) == ("Search", None)


def test_without_a_path_imports_are_not_followed(tmp_path: Path) -> None:
    report = _project(tmp_path, "from myapp.research import research_app", "research_app")
    node = extract(report.read_text()).nodes[0]
    assert (node.name, node.subgraph) == ("research_app", None)


def test_an_edit_inside_an_imported_subgraph_is_written_to_the_defining_file(
    tmp_path: Path,
) -> None:
    """Rename a node of the child: the child's module changes (comments kept), the parent
    file does not, and both still read back as the edited graphs."""
    report = _project(tmp_path, "import myapp.research as r", "r.research_app")
    parent_before = report.read_bytes()
    node = _read(report, tmp_path).node("Research")
    assert node.subgraph_file is not None and node.subgraph is not None
    defining = tmp_path / node.subgraph_file
    child_text = defining.read_text()
    child = extract(child_text, node.subgraph, path=defining, root=tmp_path)
    assert child == node.child
    edited = edits.rename_node(child, "Check", "Verify")
    defining.write_text(reconstruct(child_text, edited, path=defining, root=tmp_path))
    written = defining.read_text()
    assert 'research.add(Check, name="Verify")' in written
    assert 'research.edge("Search", "Verify")  # keep this comment' in written
    assert report.read_bytes() == parent_before
    again = _read(report, tmp_path).node("Research")
    assert again.child is not None and [n.name for n in again.child.nodes] == ["Search", "Verify"]


# -- the agent loop, decomposed -------------------------------------------------------------

LOOP_FILE = """\
from tensorsketch import END, START, Graph
from tensorsketch.agents import Agent, AgentState, decompose, decomposed_agent

helper = Agent(provider, tools=[add], name="helper")
solver = decomposed_agent(provider, tools=[add], name="solver")

g = Graph(AgentState)
g.add(decompose(helper))
g.add(solver)
g.add(decomposed_agent(provider), name="Plain")
g.edge(START, "helper")
g.edge("helper", "solver")
g.edge("solver", "Plain")
g.edge("Plain", END)
"""


def test_the_decomposed_agent_loop_extracts_as_its_model_and_tools_cycle() -> None:
    ir = extract(LOOP_FILE)
    assert [n.name for n in ir.nodes] == ["helper", "solver", "Plain"]
    for node, agent in zip(ir.nodes, ["helper", "solver", "agent"], strict=True):
        assert node.subgraph == agent and node.child is not None
        assert [n.name for n in node.child.nodes] == ["model", "tools"]
        cycle = {(e.source, e.target) for e in node.child.edges}
        assert cycle == {
            (START, "model"),
            ("model", "model"),
            ("model", "tools"),
            ("model", END),
            ("tools", "model"),
            ("tools", END),
        }
        assert {p.name for p in node.inputs} >= {"query", "messages", "output", "status"}
    assert reconstruct(LOOP_FILE, ir) == LOOP_FILE


def test_the_canvas_draws_the_loop_decompose_builds() -> None:
    """The canvas knows the loop's shape rather than reading the library; the runtime's
    own graph says it is still that shape, and AgentState still has those fields."""
    agents = pytest.importorskip("tensorsketch.agents")
    from tensorsketch import FakeProvider
    from tensorsketch.canvas._agent_loop import AGENT_FIELDS, loop_graph

    loop = agents.decompose(agents.Agent(FakeProvider([]), name="helper"))
    structure = loop.structure
    drawn = loop_graph("helper")
    assert list(structure.nodes) == [n.name for n in drawn.nodes]
    runtime = set(structure.edges) | {
        (source, target)
        for source, info in structure.branches.items()
        for target in (info.mapping or {}).values()
    }
    assert runtime == {(e.source, e.target) for e in drawn.edges}
    assert {e.path for e in drawn.edges if e.kind == "conditional"} == {
        info.path_name for info in structure.branches.values()
    }
    assert [p.name for p in AGENT_FIELDS] == list(agents.AgentState.model_fields)


def test_a_decomposed_loop_imported_from_another_module(tmp_path: Path) -> None:
    (tmp_path / "agents_def.py").write_text(
        "from tensorsketch.agents import decomposed_agent\n"
        'solver = decomposed_agent(provider, name="solver")\n'
    )
    main = tmp_path / "main.py"
    main.write_text(
        "from tensorsketch import END, START, Graph\nfrom agents_def import solver\n"
        'g = Graph(AgentState).add(solver).edge(START, "solver").edge("solver", END)\n'
    )
    node = extract(main.read_text(), path=main).nodes[0]
    assert node.name == "solver" and node.child is not None
    assert [n.name for n in node.child.nodes] == ["model", "tools"]


# -- the Studio: opening and editing the defining file ---------------------------------------

TOKEN = "subgraph-token"


async def test_the_studio_shows_and_edits_an_imported_subgraph_in_its_own_file(
    tmp_path: Path,
) -> None:
    import httpx

    from tensorsketch.canvas.studio.app import Studio
    from tensorsketch.canvas.studio.routes import create_app

    report = _project(tmp_path, "from myapp.research import research_app", "research_app")
    parent_before = report.read_bytes()
    app = create_app(Studio(path=report, token=TOKEN, project=tmp_path))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://127.0.0.1:8765",
        headers={"X-Studio-Token": TOKEN},
    ) as client:
        parent = (await client.get("/api/graph")).json()
        node = parent["graph"]["nodes"][0]
        assert (node["name"], node["subgraph_file"]) == ("Research", "myapp/research.py")
        assert [n["name"] for n in node["child"]["nodes"]] == ["Search", "Check"]
        query = {"file": node["subgraph_file"], "graph": node["subgraph"]}
        child = (await client.get("/api/graph", params=query)).json()
        assert child["file"] == str(tmp_path / "myapp" / "research.py")
        assert [n["name"] for n in child["graph"]["nodes"]] == ["Search", "Check"]
        body = {
            "version": child["version"],
            "op": "rename_node",
            "args": {"old": "Check", "new": "Verify"},
            **query,
        }
        r = await client.post("/api/edit", json=body)
        assert r.status_code == 200, r.text
        assert [n["name"] for n in r.json()["graph"]["nodes"]] == ["Search", "Verify"]
        assert (
            'research.add(Check, name="Verify")' in (tmp_path / "myapp" / "research.py").read_text()
        )
        assert report.read_bytes() == parent_before
        # the parent's nested child follows the edit
        again = (await client.get("/api/graph")).json()["graph"]["nodes"][0]["child"]
        assert [n["name"] for n in again["nodes"]] == ["Search", "Verify"]
        # layout of the child file goes to the child's sidecar
        r = await client.post(
            "/api/layout", json={"file": query["file"], "positions": {"Verify": {"x": 1, "y": 2}}}
        )
        assert r.status_code == 200 and (tmp_path / "myapp" / "research.py.layout.json").exists()
        # files the Studio will not open: a 4xx naming the problem, never a 5xx
        for bad, status in (
            ("../outside.py", 400),
            ("/etc/passwd.py", 400),
            ("myapp/research.txt", 400),
            ("myapp/nope.py", 404),
        ):
            r = await client.get("/api/graph", params={"file": bad})
            assert r.status_code == status, (bad, r.text)
            assert "file" in r.json()["error"]


def test_renaming_a_subgraph_node_in_a_rshift_file_keeps_it_a_subgraph() -> None:
    """The >> writer renames a node as a named ``g.nodes(("Triage", sub_app))`` entry; that
    entry is read as the subgraph it is (it was read as a plain node, so the write-back
    refused its own output — found by the subgraph property test)."""
    source = (Path(__file__).parent / "corpus" / "subgraph_styles.py").read_text()
    source += (
        '\nrs = Graph(Outer)\nrs.add(dig, name="Sub")\nsub_h = rs["Sub"]\n(w,) = rs.nodes(Write)\n'
    )
    source += "START >> sub_h >> w >> END\n"
    ir = extract(source, "rs")
    assert ir.node("Sub").subgraph == "dig"
    written = reconstruct(source, edits.rename_node(ir, "Sub", "Triage"))
    assert '(sub_h,) = rs.nodes(("Triage", dig))' in written
    again = extract(written, "rs").node("Triage")
    assert again.subgraph == "dig" and again.child is not None


def test_the_command_line_ir_nests_an_imported_subgraph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from tensorsketch.canvas._cli import main

    report = _project(tmp_path, "from myapp.research import research_app", "research_app")
    assert main(["--ir", str(report), "--project", str(tmp_path)]) == 0
    node = json.loads(capsys.readouterr().out)["nodes"][0]
    assert node["subgraph_file"] == "myapp/research.py"
    assert [n["name"] for n in node["child"]["nodes"]] == ["Search", "Check"]
