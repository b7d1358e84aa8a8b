"""Developer and CI tasks. `python -m nox` runs the CI set; `nox -s <name>` runs one.

Every distribution is tested in its own fresh virtualenv that holds only that distribution and
what it declares (so a missing dependency declaration fails), installed from a built wheel
layout (non-editable). The `integration` session installs everything editable, as developers
do, and runs the cross-package tests in `tests/`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = ROOT / "packages"
CORE = "tensorsketch-core"
DISTS = [
    "tensorsketch-core",
    "tensorsketch-canvas",
    "tensorsketch-providers",
    "tensorsketch-backends",
    "tensorsketch-serve",
    "tensorsketch-interop",
    "tensorsketch-eval",
]
META = "tensorsketch"
DEV_TOOLS = ["pytest>=8", "pytest-asyncio>=0.24", "hypothesis>=6", "pytest-timeout"]

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["services", "lint", "typecheck", "tests", "integration", "build", "docs"]


def _pytest(
    session: nox.Session,
    *paths: str,
    options: Sequence[str] = (),
    timeout: int = 600,
    env: dict[str, str] | None = None,
) -> None:
    args = session.posargs or []
    session.run(
        "python",
        "-m",
        "pytest",
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(ROOT),
        "-p",
        "no:cacheprovider",
        f"--timeout={timeout}",
        *options,
        *paths,
        *args,
        env={
            "TS_TEST_RUN_ID": os.environ.get("TS_TEST_RUN_ID", f"nox{os.getpid()}"),
            **(env or {}),
        },
    )


@nox.session(python=False)
def services(session: nox.Session) -> None:
    """Start PostgreSQL and Redis on 127.0.0.1 where they are not already running."""
    session.run("bash", str(ROOT / "tools" / "services.sh"), external=True)


@nox.session
@nox.parametrize("dist", DISTS)
def tests(session: nox.Session, dist: str) -> None:
    """One distribution, alone in a fresh venv with only what it declares."""
    pkg = PACKAGES / dist
    targets = [str(pkg) + "[test]"]
    if dist != CORE:
        targets.insert(0, str(PACKAGES / CORE))
    session.install(*targets, *DEV_TOOLS)
    _pytest(session, str(pkg / "tests"))


#: The canvas properties the soak runs long: round trip, three styles, random edits.
SOAK_PROPERTIES = "round_trips or three_styles or random_edits"


@nox.session(name="canvas-soak")
def canvas_soak(session: nox.Session) -> None:
    """The canvas write-back properties at 10,000 examples each with a fresh, printed seed.

    Not part of CI (which runs them derandomized at small counts). TS_CANVAS_EXAMPLES changes
    the count; `nox -s canvas-soak -- --hypothesis-seed=N` replays a run.
    """
    pkg = PACKAGES / "tensorsketch-canvas"
    # Editable, so a soak after a fix always runs the code in the tree.
    session.install("-e", str(PACKAGES / CORE), "-e", f"{pkg}[test]", *DEV_TOOLS)
    examples = os.environ.get("TS_CANVAS_EXAMPLES", "10000")
    seeded = any(arg.startswith("--hypothesis-seed") for arg in session.posargs)
    seed = [] if seeded else [f"--hypothesis-seed={secrets.randbits(64)}"]
    session.log(
        f"canvas soak: {examples} examples per property, {' '.join(seed or session.posargs)}"
    )
    _pytest(
        session,
        str(pkg / "tests" / "test_roundtrip.py"),
        options=[*seed, "-k", SOAK_PROPERTIES, "--durations=0", "--hypothesis-show-statistics"],
        timeout=0,
        env={"TS_CANVAS_EXAMPLES": examples},
    )


@nox.session
def integration(session: nox.Session) -> None:
    """Everything editable in one venv (the developer layout) + the cross-package tests."""
    editable = []
    for dist in DISTS:
        extra = (
            "[all]" if (PACKAGES / dist / "pyproject.toml").read_text().find("\nall =") >= 0 else ""
        )
        editable += ["-e", f"{PACKAGES / dist}{extra}"]
    session.install(*editable, *DEV_TOOLS, "build")
    session.install("--no-deps", "-e", str(PACKAGES / META))
    _pytest(session, str(ROOT / "tests"))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check + ruff format --check over the whole tree."""
    session.install("ruff>=0.17,<0.18")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every distribution's sources."""
    editable = []
    for dist in DISTS:
        text = (PACKAGES / dist / "pyproject.toml").read_text()
        editable += ["-e", f"{PACKAGES / dist}{'[all]' if chr(10) + 'all =' in text else ''}"]
    session.install(*editable, "mypy>=1.13", "pytest", "hypothesis")
    srcs = [str(PACKAGES / d / "src") for d in DISTS]
    typing_checks = str(PACKAGES / CORE / "tests" / "typing")
    session.run("mypy", *srcs, typing_checks)


def _build(session: nox.Session, dist: str, out: Path) -> list[Path]:
    # TENSORSKETCH_RELEASE=1: the meta-package pins `==version` instead of sibling folders.
    session.run(
        "python",
        "-m",
        "build",
        "--sdist",
        "--wheel",
        "--outdir",
        str(out),
        str(PACKAGES / dist),
        silent=True,
        env={"TENSORSKETCH_RELEASE": "1"},
    )
    return sorted(out.glob("*"))


def _check_artifacts(session: nox.Session, dist: str, out: Path) -> None:
    wheels = list(out.glob("*.whl"))
    sdists = list(out.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        session.error(f"{dist}: expected one wheel and one sdist in {out}, got {wheels + sdists}")
    names = zipfile.ZipFile(wheels[0]).namelist()
    has_root_init = "tensorsketch/__init__.py" in names
    if dist == CORE and not has_root_init:
        session.error("tensorsketch-core's wheel must contain tensorsketch/__init__.py")
    if dist not in (CORE, META) and has_root_init:
        session.error(f"{dist}'s wheel must not contain tensorsketch/__init__.py (namespace)")
    shared = [
        "tensorsketch/runtime/__init__.py",
        "tensorsketch/runtime/backends/__init__.py",
        "tensorsketch/observability/__init__.py",
        "tensorsketch/providers/__init__.py",
        "tensorsketch/interop/__init__.py",
    ]
    if dist != CORE:
        clash = [n for n in shared if n in names]
        if clash:
            session.error(f"{dist}'s wheel ships shared namespace levels: {clash}")
    stray = [n for n in names if n.endswith(".py") and not n.startswith("tensorsketch/")]
    if stray:
        session.error(f"{dist}'s wheel has modules outside the tensorsketch namespace: {stray}")
    if dist == META:
        wheel = zipfile.ZipFile(wheels[0])
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        requires = [
            line
            for line in wheel.read(meta).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
        local = [r for r in requires if "file:" in r]
        if local or not requires:
            session.error(f"the meta-package must pin released versions, got {local or requires}")
    if dist != META:
        if not any(n.endswith("py.typed") for n in names):
            session.error(f"{dist}'s wheel has no py.typed marker")
        if not any(n.endswith(".py") for n in names):
            session.error(f"{dist}'s wheel contains no Python modules")
    else:
        code = [n for n in names if n.endswith(".py")]
        if code:
            session.error(f"the meta-package must ship no code, found {code}")
    session.log(f"{dist}: {wheels[0].name} ({len(names)} files) + {sdists[0].name} OK")


@nox.session
def build(session: nox.Session) -> None:
    """Build every distribution's wheel + sdist and check what they contain."""
    session.install("build")
    root = ROOT / "dist"
    shutil.rmtree(root, ignore_errors=True)
    for dist in [*DISTS, META]:
        out = root / dist
        _build(session, dist, out)
        _check_artifacts(session, dist, out)


@nox.session
def release(session: nox.Session) -> None:
    """`nox -s release -- <dist>`: build and check one distribution (no upload)."""
    if not session.posargs:
        session.error(f"name a distribution: nox -s release -- <{'|'.join([*DISTS, META])}>")
    dist = session.posargs[0]
    if dist not in [*DISTS, META]:
        session.error(f"unknown distribution {dist!r}; choose one of {[*DISTS, META]}")
    session.install("build", "twine")
    out = ROOT / "dist" / "release" / dist
    shutil.rmtree(out, ignore_errors=True)
    artifacts = _build(session, dist, out)
    _check_artifacts(session, dist, out)
    session.run("twine", "check", "--strict", *map(str, artifacts))


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site with warnings as errors."""
    session.install("mkdocs>=1.6")
    session.run("mkdocs", "build", "--strict", "--site-dir", str(ROOT / "site"))


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks side by side with LangGraph (installed from PyPI in this venv only)."""
    session.install("-r", str(ROOT / "benchmarks" / "requirements.txt"))
    session.install(
        "-e",
        str(PACKAGES / CORE),
        "-e",
        str(PACKAGES / "tensorsketch-canvas"),
        "-e",
        f"{PACKAGES / 'tensorsketch-backends'}[all]",
    )
    session.run("python", str(ROOT / "benchmarks" / "run.py"), *session.posargs)


@nox.session(python=False)
def demo(session: nox.Session) -> None:
    """The main job: the offline demo on embedded defaults (SQLite, FakeProvider)."""
    session.run(sys.executable, str(ROOT / "examples" / "demo.py"), external=True)
