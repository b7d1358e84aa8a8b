"""``tensorsketch.cli``: the helpers every distribution's command shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.cli import load_graph


def test_load_graph_names_what_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bots.py").write_text(
        "from tensorsketch import FakeProvider, create_agent\n"
        "agent = create_agent(FakeProvider(['hi']))\nnot_a_graph = 3\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_graph("bots:agent").name == "agent"
    with pytest.raises(ValueError, match="not MODULE:ATTR"):
        load_graph("bots")
    with pytest.raises(ValueError, match="cannot import module 'nobots'"):
        load_graph("nobots:agent")
    with pytest.raises(ValueError, match="has no attribute 'agnet'"):
        load_graph("bots:agnet")
    with pytest.raises(ValueError, match="is a int, not a compiled graph"):
        load_graph("bots:not_a_graph")
