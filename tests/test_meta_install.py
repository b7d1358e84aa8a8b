"""`pip install tensorsketch` is the one install where everything works (SPEC-NOTES
"Packaging"): from the built wheels into a fresh venv, an agent runs on every vendor provider
(the real SDKs, against the providers tests' local wire server), and msgpack checkpoints, MCP,
the OTel bridge, serving and the canvas import."""

from __future__ import annotations

import json
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROVIDER_TESTS = ROOT / "packages" / "tensorsketch-providers" / "tests"
VERSION = (ROOT / "VERSION").read_text().strip()
FIRST_PARTY = [
    "tensorsketch-core",
    "tensorsketch-canvas",
    "tensorsketch-providers",
    "tensorsketch-backends",
    "tensorsketch-serve",
    "tensorsketch-interop",
    "tensorsketch-eval",
]
#: First-party distributions only an extra brings (`tensorsketch[ray]`), and the third-party
#: packages the plain install must not pull with them.
OPT_IN = {"tensorsketch-ray": "ray"}
NOT_IN_DEFAULT = ["tensorsketch-ray", "ray"]

# Runs in the fresh venv. The wire server and the vendor plays are the providers tests' own
# modules, imported from their folder (not copied).
SCRIPT = """
import asyncio, importlib, importlib.metadata as md, json, sys
sys.path.insert(0, sys.argv[1])
import wire_server, vendor_plays
from tensorsketch import create_agent, tool
from tensorsketch.messages import ToolCall

import tensorsketch.providers.openai, tensorsketch.providers.anthropic, tensorsketch.providers.google
for name in ["ormsgpack", "mcp", "tensorsketch.interop.mcp", "tensorsketch.observability.otel", "tensorsketch.serve", "tensorsketch.serve.a2a", "tensorsketch.canvas",
             "tensorsketch.eval", "tensorsketch.runtime.backends"]:
    importlib.import_module(name)

@tool
def add(a: int, b: int) -> int:
    \"\"\"Add two numbers.\"\"\"
    return a + b

async def run(name):
    play = vendor_plays.PLAYS[name]()
    server = wire_server.WireServer().start()
    try:
        call = ToolCall(id="call_1", name="add", args={"a": 2, "b": 3})
        server.queue(play.tool_calls([call]), play.text("2 + 3 = 5."))
        agent = create_agent(play.provider(server.url), tools=[add], system="Add.")
        result = await agent.invoke({"query": "what is 2 + 3?"})
        for provider in play.created:
            await provider.aclose()
        return {"output": result.output, "requests": [r.path for r in server.requests],
                "roles": [m.role for m in result.messages]}
    finally:
        server.stop()

out = {name: asyncio.run(run(name)) for name in sorted(vendor_plays.PLAYS)}
out["metadata"] = {d: md.distribution(d).read_text("METADATA") for d in json.loads(sys.argv[2])}
out["absent"] = []
for name in json.loads(sys.argv[3]):
    try:
        md.distribution(name)
    except md.PackageNotFoundError:
        out["absent"].append(name)
print(json.dumps(out))
"""


def _wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return archive.read(name).decode()


@pytest.mark.slow
def test_pip_install_tensorsketch_runs_an_agent_on_every_provider(
    tmp_path: Path, wheel_dir: Path, venvs: Any
) -> None:
    started = time.perf_counter()
    python = venvs.make(tmp_path / "venv")
    # By name, as a user types it; the first-party wheels come from the built folder. uv takes
    # them from there (the metadata check below proves it). pip treats --find-links as one more
    # index and may take a same-named, same-version release from the configured index instead
    # (this machine's registry has an unrelated `tensorsketch-core 0.1.0`), so without uv the
    # built wheels of the plain install are also named as files.
    built = [next(wheel_dir.glob(f"{d.replace('-', '_')}-{VERSION}-*.whl")) for d in FIRST_PARTY]
    files = [] if venvs.uses_uv else [str(w) for w in built]
    venvs.install(python, "--find-links", str(wheel_dir), *files, f"tensorsketch=={VERSION}")
    installed = time.perf_counter()
    done = subprocess.run(
        [
            str(python),
            "-c",
            SCRIPT,
            str(PROVIDER_TESTS),
            json.dumps(["tensorsketch", *FIRST_PARTY]),
            json.dumps(NOT_IN_DEFAULT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    for vendor in ("anthropic", "openai", "google"):
        assert result[vendor]["output"] == "2 + 3 = 5.", (vendor, result[vendor])
        assert result[vendor]["roles"] == ["system", "user", "assistant", "tool", "assistant"]
        assert len(result[vendor]["requests"]) == 2
    # Every first-party distribution is the one built here (not a same-named index release).
    for dist in ["tensorsketch", *FIRST_PARTY]:
        wheel = next(wheel_dir.glob(f"{dist.replace('-', '_')}-{VERSION}-*.whl"))
        assert result["metadata"][dist] == _wheel_metadata(wheel), dist
    # Ray stays opt-in: the plain install has neither it nor the worker pool, and the meta
    # names the pool in its extra.
    assert result["absent"] == NOT_IN_DEFAULT
    meta = result["metadata"]["tensorsketch"]
    for dist, extra in OPT_IN.items():
        assert f"Requires-Dist: {dist}=={VERSION}; extra == '{extra}'" in meta.replace('"', "'")
    print(  # shown with -s / -rP: how long a fresh install + three agents take
        f"fresh venv install {installed - started:.1f}s, "
        f"agents {time.perf_counter() - installed:.1f}s"
    )
