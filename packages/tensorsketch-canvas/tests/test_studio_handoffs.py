"""The Studio reads a file's agents and handoffs and writes handoff edits back (POST /api/handoff)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tensorsketch.canvas.studio.app import Studio
from tensorsketch.canvas.studio.routes import create_app

TOKEN = "test-token-123"
TEAM = """\
from tensorsketch import Agent, FakeProvider, create_agent, handoff
from tensorsketch.agents import without_tools

billing = Agent(FakeProvider(), name="billing")
refunds = Agent(FakeProvider(), name="refunds")
triage = create_agent(
    FakeProvider(),
    name="triage",
    handoffs=[handoff(billing, input_filter=without_tools)],
)
"""


@pytest.fixture
def team_file(tmp_path: Path) -> Path:
    path = tmp_path / "team.py"
    path.write_text(TEAM, encoding="utf-8")
    return path


@pytest.fixture
async def client(team_file: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Studio(path=team_file, token=TOKEN, project=team_file.parent))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://127.0.0.1:8765",
        headers={"X-Studio-Token": TOKEN},
    ) as c:
        yield c


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_the_graph_view_lists_agents_and_handoff_edges(client: httpx.AsyncClient) -> None:
    view = (await client.get("/api/graph")).json()
    assert view["graph"] is None  # no Graph builder in the file: the team is the view
    assert [a["name"] for a in view["team"]["agents"]] == ["billing", "refunds", "triage"]
    assert view["team"]["handoffs"] == [
        {
            "kind": "handoff",
            "source": "triage",
            "target": "billing",
            "tool_name": None,
            "input_filter": "without_tools",
            "requires_approval": False,
            "by_name": False,
        }
    ]


async def test_adding_and_removing_a_handoff_writes_the_file_back_byte_for_byte(
    client: httpx.AsyncClient, team_file: Path
) -> None:
    version = sha(team_file)
    added = await client.post(
        "/api/handoff",
        json={"version": version, "op": "add", "source": "triage", "target": "refunds"},
    )
    assert added.status_code == 200, added.text
    text = read(team_file)
    assert "handoffs=[handoff(billing, input_filter=without_tools), refunds]," in text
    assert [(e["source"], e["target"]) for e in added.json()["team"]["handoffs"]] == [
        ("triage", "billing"),
        ("triage", "refunds"),
    ]
    removed = await client.post(
        "/api/handoff",
        json={
            "version": added.json()["version"],
            "op": "remove",
            "source": "triage",
            "target": "refunds",
        },
    )
    assert removed.status_code == 200, removed.text
    assert read(team_file) == TEAM


async def test_bad_handoff_edits_are_4xx_and_write_nothing(
    client: httpx.AsyncClient, team_file: Path
) -> None:
    version = sha(team_file)
    cases = [
        ({"op": "add", "source": "triage", "target": "refunds"}, 400, "version"),
        ({"version": version, "op": "move", "source": "a", "target": "b"}, 400, "'op'"),
        ({"version": version, "op": "add", "source": "triage"}, 400, "'target'"),
        (
            {"version": "stale", "op": "add", "source": "triage", "target": "refunds"},
            409,
            "changed",
        ),
        ({"version": version, "op": "add", "source": "triage", "target": "nobody"}, 422, "nobody"),
        (
            {"version": version, "op": "add", "source": "triage", "target": "billing"},
            422,
            "already",
        ),
        (
            {"version": version, "op": "remove", "source": "billing", "target": "triage"},
            422,
            "no handoff",
        ),
    ]
    for body, status, fragment in cases:
        answer = await client.post("/api/handoff", json=body)
        assert answer.status_code == status, (body, answer.text)
        assert fragment in answer.text
    assert read(team_file) == TEAM
