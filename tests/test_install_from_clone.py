"""The README's install, from this clone into a fresh venv, beside a package index that serves
decoys: an unrelated `tensorsketch` 0.1.0 and a different `tensorsketch-core` 0.1.0 (what the
index this project's users reach really serves). Every `tensorsketch*` distribution must come
from the clone, and `tensorsketch doctor` in that venv must find nothing wrong.

The decoy index is `python -m http.server` on 127.0.0.1 (a PEP 503 simple index), given as an
extra index; third-party dependencies come from the index pip and uv are configured for, as in
`test_meta_install.py`."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.testing.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
DECOYS = {"tensorsketch": "tensorsketch_decoy", "tensorsketch-core": "tensorsketch"}

# Runs in the fresh venv: every tensorsketch* distribution, where it came from, and whether a
# decoy's module is there.
SCRIPT = """
import importlib.metadata as md, importlib.util, json
out = {}
for dist in md.distributions():
    name = dist.metadata["Name"].lower().replace("_", "-")
    if name.startswith("tensorsketch"):
        out[name] = {"version": dist.version, "direct_url": json.loads(dist.read_text("direct_url.json") or "null")}
import tensorsketch
print(json.dumps({"dists": out, "decoy_module": importlib.util.find_spec("tensorsketch_decoy") is not None,
                  "decoy_core": hasattr(tensorsketch, "DECOY")}))
"""


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def decoy_wheel(folder: Path, name: str, package: str) -> Path:
    """A tiny, valid wheel named like ours whose code is someone else's."""
    stem = f"{name.replace('-', '_')}-0.1.0"
    files = {
        f"{package}/__init__.py": b"DECOY = True\n",
        f"{stem}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\nSummary: not TensorSketch\n"
        ).encode(),
        f"{stem}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: decoy\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{stem}.dist-info/RECORD"] = (record + f"{stem}.dist-info/RECORD,,\n").encode()
    wheel = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


@pytest.fixture(scope="module")
def decoy_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PEP 503 simple index on 127.0.0.1 serving the decoys; yields its URL."""
    root = tmp_path_factory.mktemp("decoy-index")
    (root / "files").mkdir()
    (root / "simple").mkdir()
    links = []
    for name, package in DECOYS.items():
        wheel = decoy_wheel(root / "files", name, package)
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        (root / "simple" / name).mkdir()
        (root / "simple" / name / "index.html").write_text(
            f'<a href="../../files/{wheel.name}#sha256={sha}">{wheel.name}</a>\n'
        )
        links.append(f'<a href="{name}/">{name}</a>')
    (root / "simple" / "index.html").write_text("\n".join(links) + "\n")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/simple/"
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(url + "tensorsketch-core/", timeout=1) as page:
                    assert b"tensorsketch_core-0.1.0" in page.read()
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


#: pip asks PyPI whether it is the newest pip unless told not to.
#: No cached wheel: every distribution keeps its version between commits, and a wheel pip or uv
#: cached from an earlier state of this path would stand in for the clone's code.
QUIET_PIP = {
    **os.environ,
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_CACHE_DIR": "1",
    "UV_NO_CACHE": "1",
}


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=900, check=False, cwd=ROOT, env=QUIET_PIP
    )
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_decoy_index_would_hand_pip_the_decoys_by_name(
    tmp_path: Path, decoy_index: str
) -> None:
    # the control: asked by name, pip takes what the index serves (so the index is effective)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    got = tmp_path / "got"
    _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--index-url",
            decoy_index,
            "--dest",
            str(got),
            "tensorsketch-core",
        ]
    )
    (wheel,) = got.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("tensorsketch/__init__.py") == b"DECOY = True\n"


#: The README's commands: (installer, what it installs, the README's words for it).
INSTALLS = [
    (
        "pip",
        ["./packages/tensorsketch"],
        ".venv/bin/pip install --no-cache-dir ./packages/tensorsketch ",
    ),
    ("uv", ["./packages/tensorsketch"], "uv venv && uv pip install ./packages/tensorsketch "),
    (
        "pip",
        ["./packages/tensorsketch-core", "./packages/tensorsketch-eval"],
        "`pip install ./packages/tensorsketch-core ./packages/tensorsketch-eval`",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("installer", "targets", "readme"), INSTALLS, ids=["pip", "uv", "pip-part-of-the-set"]
)
def test_the_readme_install_takes_every_tensorsketch_distribution_from_the_clone(
    tmp_path: Path,
    decoy_index: str,
    venvs: Any,
    installer: str,
    targets: list[str],
    readme: str,
) -> None:
    assert readme in README  # the command tested is the command the README gives
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    if installer == "pip":
        _run([sys.executable, "-m", "venv", str(venv)])
        install = [str(python), "-m", "pip", "install", "-q"]
    else:
        if not venvs.uses_uv:
            pytest.skip("uv is not installed here")
        uv = venvs.uv()
        _run([*uv, "venv", "-q", "-p", sys.executable, str(venv)])
        install = [*uv, "pip", "install", "-q", "-p", str(python)]
    _run([*install, "--extra-index-url", decoy_index, *targets])

    found = json.loads(_run([str(python), "-c", SCRIPT]).stdout)
    assert not found["decoy_module"] and not found["decoy_core"]
    dists = found["dists"]
    assert {Path(t).name for t in targets} | {"tensorsketch-core", "tensorsketch-eval"} <= set(
        dists
    )
    for name, info in dists.items():
        folder = (ROOT / "packages" / name).as_uri()
        assert info["direct_url"] is not None and info["direct_url"]["url"] == folder, (name, info)

    closed = f"127.0.0.1:{free_port()}"
    doctor = _run(
        [
            str(venv / "bin" / "tensorsketch"),
            "doctor",
            "--json",
            "--postgres",
            closed,
            "--redis",
            closed,
            "--timeout",
            "0.2",
        ]
    )
    report = json.loads(doctor.stdout)
    assert report["problems"] == []
    for item in report["distributions"]:
        # pip builds each folder; uv links a workspace's members editable: both are the clone
        assert item["origin"] in ("folder", "editable"), item
        assert item["source"] == str(ROOT / "packages" / item["name"]) and item["ours"], item
