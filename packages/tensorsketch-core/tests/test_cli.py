"""``tensorsketch.cli``: the helpers every distribution's command shares."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from tensorsketch.cli import READER_LEFT, load_graph, main, port


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


def test_load_graph_takes_a_file_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``path/to/file.py:attr``, as ``tensorsketch mcp serve`` and ``eval --agent`` take it."""
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "helper.py").write_text("GREETING = 'hi'\n")
    (tmp_path / "apps" / "bots_file.py").write_text(
        "from helper import GREETING\n"  # a neighbour of the file imports
        "from tensorsketch import FakeProvider, create_agent\n"
        "agent = create_agent(FakeProvider([GREETING]))\nnot_a_graph = 3\n"
    )
    (tmp_path / "apps" / "json.py").write_text(  # a stem that names another module
        "from tensorsketch import FakeProvider, create_agent\n"
        "agent = create_agent(FakeProvider(['hi']))\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    try:
        _check_file_targets(tmp_path)
    finally:  # forget the files' modules (`bots_file`, `helper`, ...)
        for name in set(sys.modules) - before:
            del sys.modules[name]


def _check_file_targets(tmp_path: Path) -> None:
    graph = load_graph("apps/bots_file.py:agent")
    assert graph.name == "agent"
    assert load_graph(f"{tmp_path}/apps/bots_file.py:agent") is graph, "imported once"
    assert sys.modules["bots_file"].agent is graph
    import json

    assert load_graph("apps/json.py:agent").name == "agent"
    assert sys.modules["json"] is json, "a file never replaces the module its stem names"
    with pytest.raises(ValueError, match=r"no Python file 'apps/nope\.py'"):
        load_graph("apps/nope.py:agent")
    with pytest.raises(ValueError, match=r"file 'apps/bots_file\.py' has no attribute 'agnet'"):
        load_graph("apps/bots_file.py:agnet")
    with pytest.raises(ValueError, match="is a int, not a compiled graph"):
        load_graph("apps/bots_file.py:not_a_graph")
    with pytest.raises(ValueError, match=r"`apps/bots_file\.py:agent`\) or .*`apps\.bots_file:"):
        load_graph("apps/bots_file:agent")


@pytest.mark.parametrize("text", ["-5", "65536", "99999", "http"])
def test_port_refuses_what_is_not_a_port(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="0-65535, got"):
        port(text)
    assert port("0") == 0 and port("65535") == 65535


def test_version_prints_every_installed_tensorsketch_distribution(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from importlib.metadata import version

    from tensorsketch.cli import installed_versions

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"tensorsketch-core {version('tensorsketch-core')}"
    names = dict(installed_versions())
    # core alone in its nox session, every distribution in the workspace: each is listed
    assert "tensorsketch-core" in names
    assert sorted(lines[1:]) == sorted(
        f"{n} {v}" for n, v in names.items() if n != "tensorsketch-core"
    )


def test_an_unknown_option_shows_the_subcommands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    """``tensorsketch plugins --bogus`` is ``plugins``' mistake: its usage, not the command list."""
    with pytest.raises(SystemExit) as exited:
        main(["plugins", "--bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: tensorsketch plugins"), err
    assert "tensorsketch plugins: error: unrecognized arguments: --bogus" in err
    with pytest.raises(SystemExit):
        main(["--bogus"])
    assert "tensorsketch: error: unrecognized arguments: --bogus" in capsys.readouterr().err


def test_a_reader_that_leaves_stops_the_command_quietly() -> None:
    """``tensorsketch ... | head``: the pipe closes under the command's output. It stops as Unix
    tools do (the shell's SIGPIPE status), with no traceback (one in five runs printed
    ``BrokenPipeError`` before)."""
    for _ in range(3):
        process = subprocess.Popen(
            [sys.executable, "-m", "tensorsketch.cli", "plugins"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()  # the reader is gone before the first line is written
        error = process.stderr.read().decode()
        assert process.wait(timeout=60) == READER_LEFT, error
        assert "Traceback" not in error and "Exception ignored" not in error, error


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["doctor", "--timeout", "-1"], "argument --timeout: must be more than 0 seconds, got -1"),
        (["doctor", "--timeout", "soon"], "argument --timeout: must be a number of seconds"),
        (["doctor", "--postgres", "postgresql://db:99999"], "Port out of range 0-65535"),
        (["doctor", "--redis", "redis://[::1"], "is not a server's address (Invalid IPv6 URL)"),
        (["trace", "report", "t.jsonl", "--top", "-1"], "argument --top: must be 1 or more"),
        (["trace", "report", "t.jsonl", "--top", "two"], "argument --top: must be a whole number"),
    ],
)
def test_a_bad_argument_is_a_usage_error_not_a_traceback(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each of these raised from deep inside the command (a traceback, status 1), or was
    taken (``--top -1`` printed a wrong count)."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err
