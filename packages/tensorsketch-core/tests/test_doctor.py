"""``tensorsketch doctor``: installed distributions with their origins, what is wrong with
them (a same-named distribution that is someone else's, mixed versions, mixed clones), the
services it can reach and the browser."""

from __future__ import annotations

import importlib.metadata as md
import json
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tensorsketch import doctor
from tensorsketch.cli import main
from tensorsketch.testing.ports import free_port

CLONE = Path(__file__).resolve().parents[3]


def fake_dist(
    root: Path,
    name: str,
    version: str = "0.1.0",
    *,
    plugin: bool = True,
    requires: tuple[str, ...] = (),
    folder: Path | None = None,
    editable: bool = True,
) -> md.Distribution:
    """A real ``.dist-info`` on disk, as an installer writes it."""
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    if plugin:
        module = name.removeprefix("tensorsketch-") or "meta"
        (info / "entry_points.txt").write_text(
            f"[tensorsketch]\n{module} = tensorsketch._plugins.{module}\n"
        )
    if folder is not None:
        direct = {"url": folder.as_uri(), "dir_info": {"editable": True} if editable else {}}
        (info / "direct_url.json").write_text(json.dumps(direct))
    return md.PathDistribution(info)


def test_this_install_is_every_distribution_from_this_clone() -> None:
    # editable in the dev venv (`uv sync`), built from the folder in a nox session
    items = {item.name: item for item in doctor.installed()}
    core = items["tensorsketch-core"]
    assert core.origin in ("editable", "folder")
    assert (core.source, core.ours) == (str(CLONE / "packages" / "tensorsketch-core"), True)
    assert all(i.source and i.source.startswith(str(CLONE)) for i in items.values())
    assert doctor.diagnose(list(items.values())) == []


def test_a_same_named_distribution_from_an_index_is_named_with_the_fix(tmp_path: Path) -> None:
    clone = tmp_path / "clone" / "packages"
    dists = [
        fake_dist(tmp_path, "tensorsketch-core", folder=clone / "tensorsketch-core"),
        # the unrelated `tensorsketch` 0.1.0 on the index: no requirement on our core
        fake_dist(tmp_path, "tensorsketch", plugin=False, requires=("requests",)),
        # someone's plugin is not ours to judge
        fake_dist(tmp_path, "tensorsketch-acme", version="3.0"),
    ]
    items = doctor.installed(dists)
    assert [(i.name, i.origin, i.ours, i.first_party) for i in items] == [
        ("tensorsketch", "index", False, True),
        ("tensorsketch-acme", "index", True, False),
        ("tensorsketch-core", "editable", True, True),
    ]
    (problem,) = doctor.diagnose(items)
    assert problem.startswith("tensorsketch 0.1.0 (from a package index) is not TensorSketch")
    assert (
        "pip uninstall tensorsketch" in problem and "pip install ./packages/tensorsketch" in problem
    )


def test_the_genuine_meta_package_is_recognised(tmp_path: Path) -> None:
    clone = tmp_path / "packages"
    dists = [
        fake_dist(tmp_path, "tensorsketch-core", folder=clone / "tensorsketch-core"),
        fake_dist(
            tmp_path,
            "tensorsketch",
            plugin=False,
            requires=(f"tensorsketch-core @ {(clone / 'tensorsketch-core').as_uri()}",),
            folder=clone / "tensorsketch",
            editable=False,
        ),
    ]
    items = doctor.installed(dists)
    assert [(i.name, i.origin, i.ours) for i in items] == [
        ("tensorsketch", "folder", True),
        ("tensorsketch-core", "editable", True),
    ]
    assert doctor.diagnose(items) == []


def test_mixed_versions_and_mixed_clones_are_problems(tmp_path: Path) -> None:
    one, two = tmp_path / "one" / "packages", tmp_path / "two" / "packages"
    dists = [
        fake_dist(tmp_path / "a", "tensorsketch-core", folder=one / "tensorsketch-core"),
        fake_dist(tmp_path / "b", "tensorsketch-eval", "0.2.0", folder=two / "tensorsketch-eval"),
    ]
    versions, clones = doctor.diagnose(doctor.installed(dists))
    assert "different versions (tensorsketch-core 0.1.0, tensorsketch-eval 0.2.0)" in versions
    assert f"different clones ({one.parent}, {two.parent})" in clones


def test_without_our_core_the_doctor_says_so(tmp_path: Path) -> None:
    dists = [
        fake_dist(tmp_path, "tensorsketch-core", plugin=False),  # the older, different core
        fake_dist(
            tmp_path, "tensorsketch-eval", folder=tmp_path / "packages" / "tensorsketch-eval"
        ),
    ]
    problems = doctor.diagnose(doctor.installed(dists))
    assert problems[0].startswith("tensorsketch-core 0.1.0 (from a package index) is not")
    assert "tensorsketch-core (the engine every other distribution needs) is not" in problems[1]


class _Answer(socketserver.BaseRequestHandler):
    reply = b""

    def handle(self) -> None:
        self.request.recv(64)
        self.request.sendall(self.reply)


@pytest.fixture
def server() -> Iterator[dict[str, int]]:
    """Two fake servers on 127.0.0.1: one answers like PostgreSQL, one like Redis."""
    ports: dict[str, int] = {}
    servers = []
    for name, reply in (("postgres", b"N"), ("redis", b"+PONG\r\n")):
        handler = type(f"{name}Handler", (_Answer,), {"reply": reply})
        srv = socketserver.TCPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        ports[name] = srv.server_address[1]
    yield ports
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_services_are_knocked_on_over_their_wire_protocol(server: dict[str, int]) -> None:
    pg = doctor.probe_postgres(f"postgresql://user@127.0.0.1:{server['postgres']}/db")
    assert pg.reachable and pg.address == f"127.0.0.1:{server['postgres']}"
    assert "a PostgreSQL server answered" in pg.detail
    redis = doctor.probe_redis(f"redis://127.0.0.1:{server['redis']}/0")
    assert redis.reachable and "PONG" in redis.detail
    # the wrong service on a port is not taken for the right one
    wrong = doctor.probe_redis(f"redis://127.0.0.1:{server['postgres']}")
    assert not wrong.reachable and "not Redis" in wrong.detail


def test_a_closed_port_is_reported_quickly_with_the_cause() -> None:
    closed = free_port()
    started = time.perf_counter()
    probe = doctor.probe_postgres(f"postgresql://127.0.0.1:{closed}", timeout=0.5)
    assert time.perf_counter() - started < 2.0
    assert not probe.reachable and "no answer" in probe.detail and "driver psycopg" in probe.detail


def test_the_command_prints_a_report_and_exits_by_its_problems(
    server: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    closed = free_port()
    code = main(
        [
            "doctor",
            "--json",
            "--postgres",
            f"postgresql://127.0.0.1:{closed}",
            "--redis",
            f"redis://127.0.0.1:{server['redis']}",
            "--timeout",
            "0.5",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["problems"] == []
    names = {d["name"]: d for d in report["distributions"]}
    assert names["tensorsketch-core"]["origin"] in ("editable", "folder")
    assert [s["reachable"] for s in report["services"]] == [False, True]
    assert report["browser"] in (None, "/usr/bin/chromium")

    assert main(["doctor", "--postgres", f"127.0.0.1:{closed}", "--timeout", "0.2"]) == 0
    text = capsys.readouterr().out
    assert "TensorSketch distributions:" in text and "No problems found." in text
    assert f"postgresql  127.0.0.1:{closed}" in text


def test_a_problem_makes_the_exit_code_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    decoy = [fake_dist(tmp_path, "tensorsketch", plugin=False)]
    report = doctor.check(dists=decoy, timeout=0.1, browser=tmp_path / "no-chromium")
    assert report.problems and "NOT TENSORSKETCH" in report.render()
    assert report.browser is None and "apt-get install chromium" in report.browser_hint
    found = doctor.installed(decoy)
    monkeypatch.setattr(doctor, "installed", lambda dists=None: found)
    closed = f"127.0.0.1:{free_port()}"
    assert main(["doctor", "--postgres", closed, "--redis", closed, "--timeout", "0.2"]) == 1
    assert "Problems:\n  - tensorsketch 0.1.0 (from a package index)" in capsys.readouterr().out
