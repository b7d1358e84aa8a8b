"""Developer and CI tasks. `python -m nox` runs the CI set; `nox -s <name>` runs one.

Every distribution is tested in its own fresh virtualenv that holds only that distribution and
what it declares (so a missing dependency declaration fails), installed from a built wheel
layout (non-editable). The `integration` session installs everything editable, as developers
do, and runs the cross-package tests in `tests/`.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import sys
import tarfile
import tempfile
import tomllib
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
    "tensorsketch-ray",
]
META = "tensorsketch"
# What `pip install tensorsketch` must bring (SPEC-NOTES "Packaging"): every first-party
# distribution, with the extras that pull in ormsgpack (MsgpackSerializer), the provider SDKs,
# MCP, the OTel bridge and the a2a-sdk (serving)...
META_DEFAULT_EXTRAS = {
    "tensorsketch-core": {"msgpack"},
    "tensorsketch-providers": {"all"},
    "tensorsketch-interop": {"all"},
    "tensorsketch-serve": {"a2a"},
}
# ...and the opt-in extras: extra -> requirement name -> extras that requirement must carry.
META_OPT_IN = {
    "postgres": {"tensorsketch-backends": {"postgres"}},
    "redis": {"tensorsketch-backends": {"redis"}},
    "ray": {"tensorsketch-ray": set()},
    "all": {"tensorsketch-backends": {"all"}, "tensorsketch-ray": set()},
}
# First-party distributions only an extra brings, and what the plain install must never pull
# (Ray: ~200 MiB installed, a GiB running).
META_OPT_IN_DISTS = {"tensorsketch-ray"}
META_NEVER_DEFAULT = {"tensorsketch-ray", "ray"}
# The one version source every distribution reads (`[tool.hatch.version]` in each pyproject).
VERSION_FILE = ROOT / "VERSION"
LICENSE = ROOT / "LICENSE"
URL_KEYS = {"Homepage", "Documentation", "Repository", "Issues", "Changelog"}
RUFF = "ruff>=0.17,<0.18"  # the lint session and .pre-commit-config.yaml's ruff rev agree on it
DEV_TOOLS = [
    "pytest>=8",
    "pytest-asyncio>=0.24",
    "hypothesis>=6",
    "pytest-timeout",
    "pytest-xdist>=3",
]
# pytest-xdist workers (`-n`) for the `tests` session of each distribution whose tests pass
# that way (measured on 2 cores, twice each: core, canvas, backends, serve and interop take a
# quarter to a half less time). Names on the shared PostgreSQL/Redis servers carry the xdist
# worker id (tensorsketch.testing.services), and every server a test starts takes a free port;
# canvas's browser modules launch one headless Chromium per worker. The rest run in one
# process:
# - tensorsketch-ray: each worker would start its own two-node Ray cluster in its own private
#   network namespace (~20 s and ~1 GiB each): two clusters on 2 cores, for ~20 s saved.
# - tensorsketch-eval (its browser test and CLI subprocesses dominate) and
#   tensorsketch-providers (~20 s): no gain once the workers have started.
# The integration session stays serial too: its session fixture builds every wheel, which
# each worker would do again.
TEST_WORKERS = {
    "tensorsketch-core": 2,
    "tensorsketch-canvas": 2,
    "tensorsketch-backends": 2,
    "tensorsketch-serve": 2,
    "tensorsketch-interop": 2,
}
# The integration session adds `uv` (its tests build every wheel with `uv build`); `uv sync`'s
# dev group must hold all of these, or a bare `uv run pytest` errors where nox passes.
INTEGRATION_TOOLS = [*DEV_TOOLS, "uv"]

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = [
    "services",
    "lint",
    "typecheck",
    "tests",
    "integration",
    "build",
    "docs",
    "studio-build",
]


def _pytest(
    session: nox.Session,
    *paths: str,
    options: Sequence[str] = (),
    timeout: int = 600,
    env: dict[str, str] | None = None,
) -> None:
    """pytest over ``paths`` with the root's settings, printing the 15 slowest tests (so a
    test that grows slow shows up in every CI log), and this run's id for the names on the
    shared PostgreSQL/Redis servers (``tensorsketch.testing.services``)."""
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
        "--durations=15",
        *options,
        *paths,
        *args,
        env={
            "TS_TEST_RUN_ID": os.environ.get("TS_TEST_RUN_ID", f"nox{os.getpid()}"),
            # LiteLLM fetches its price list from GitHub on import: tests stay on 127.0.0.1
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            **(env or {}),
        },
    )


@nox.session(python=False)
def services(session: nox.Session) -> None:
    """Start PostgreSQL and Redis on 127.0.0.1 where they are not already running."""
    session.run("bash", str(ROOT / "tools" / "services.sh"), external=True)


def _first_party_test_deps(pkg: Path) -> list[str]:
    """The sibling distributions a dist's `test` extra names (`tensorsketch-x[extra]==V`), as
    local paths: they are not on PyPI, so the resolver must find them in the tree."""
    project = tomllib.loads((pkg / "pyproject.toml").read_text(encoding="utf-8"))
    extras = project["project"].get("optional-dependencies", {}).get("test", [])
    found = []
    for req in extras:
        pin = re.fullmatch(r"(tensorsketch-[a-z]+)(\[[^]]*\])?==\S+", req.strip())
        if pin and pin.group(1) != CORE:
            found.append(str(PACKAGES / pin.group(1)) + (pin.group(2) or ""))
    return found


@nox.session
@nox.parametrize("dist", DISTS)
def tests(session: nox.Session, dist: str) -> None:
    """One distribution, alone in a fresh venv with only what it declares."""
    pkg = PACKAGES / dist
    targets = [str(pkg) + "[test]", *_first_party_test_deps(pkg)]
    if dist != CORE:
        targets.insert(0, str(PACKAGES / CORE))
    session.install(*targets, *DEV_TOOLS)
    workers = TEST_WORKERS.get(dist)
    _pytest(session, str(pkg / "tests"), options=["-n", str(workers)] if workers else [])


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


#: Opt-in extras outside a dist's `all` that the cross-package tests still need: the
#: reference pages import every documented module, and the examples run every feature.
DEVELOPER_EXTRAS = {
    "tensorsketch-providers": {"litellm"},
    "tensorsketch-canvas": {"fill"},
}


def _with_everything(dist: str, *, developer: bool = False) -> str:
    """A dist's folder with what `pip install tensorsketch` brings of it, plus every opt-in
    extra it calls `all` (the developer layout: every optional import resolves), and with
    ``developer`` the extras of :data:`DEVELOPER_EXTRAS` too."""
    extras = set(META_DEFAULT_EXTRAS.get(dist, set()))
    if developer:
        extras |= DEVELOPER_EXTRAS.get(dist, set())
    if "\nall =" in (PACKAGES / dist / "pyproject.toml").read_text():
        extras.add("all")
    return f"{PACKAGES / dist}[{','.join(sorted(extras))}]" if extras else str(PACKAGES / dist)


@nox.session
def integration(session: nox.Session) -> None:
    """Everything editable in one venv (the developer layout) + the cross-package tests."""
    editable = [arg for dist in DISTS for arg in ("-e", _with_everything(dist, developer=True))]
    session.install(*editable, *INTEGRATION_TOOLS)
    session.install("--no-deps", "-e", str(PACKAGES / META))
    _pytest(session, str(ROOT / "tests"))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check + ruff format --check over the whole tree."""
    session.install(RUFF)
    low, high = (tuple(map(int, v.split("."))) for v in re.findall(r"[<>]=?(\d+\.\d+)", RUFF))
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    hook = re.search(r"ruff-pre-commit\s+rev: v(\d+)\.(\d+)", config)
    if hook is None or not (low <= tuple(map(int, hook.groups())) < high):
        session.error(f".pre-commit-config.yaml's ruff rev must be within {RUFF} (the lint pin)")
    root = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    if RUFF not in root.get("dependency-groups", {}).get("dev", []):
        session.error(f"pyproject.toml's dev group must pin {RUFF!r} (the lint pin), for `uv sync`")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every distribution's sources."""
    editable = [arg for dist in DISTS for arg in ("-e", _with_everything(dist))]
    session.install(*editable, "mypy>=1.13", "pytest", "hypothesis")
    srcs = [str(PACKAGES / d / "src") for d in DISTS]
    typing_checks = str(PACKAGES / CORE / "tests" / "typing")
    session.run("mypy", *srcs, typing_checks)


def _build(session: nox.Session, dist: str, out: Path) -> list[Path]:
    # TENSORSKETCH_RELEASE=1: the meta-package pins `==version` instead of sibling folders.
    # uv's build frontend: the sdist, then the wheel built from the sdist (away from the
    # monorepo), through hatchling like `python -m build`, with the build environment cached
    # instead of made anew per package (the same files in both artifacts).
    session.run(
        "uv",
        "build",
        "--quiet",
        "--out-dir",
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
    _check_version_and_license(session, dist, wheels[0], sdists[0])
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
    if "tensorsketch/_plugins/__init__.py" in names:
        session.error(f"{dist}'s wheel ships tensorsketch/_plugins/__init__.py (a namespace level)")
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
        problems = _meta_requirement_problems([r.split(":", 1)[1].strip() for r in requires])
        if problems:
            session.error("the meta-package's Requires-Dist " + "; ".join(problems))
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


def _version() -> str:
    return VERSION_FILE.read_text(encoding="utf-8").strip()


def _check_sources(session: nox.Session) -> None:
    """What the pyprojects must agree on before anything is built: one version source, the
    first-party pins at that version, the license copy, the project URLs."""
    version = _version()
    license_text = LICENSE.read_bytes()
    problems = []
    for dist in [*DISTS, META]:
        folder = PACKAGES / dist
        project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
        meta = project["project"]
        if "version" in meta or "version" not in meta.get("dynamic", []):
            problems.append(f"{dist}: `version` must be dynamic (read from /VERSION), not static")
        source = project.get("tool", {}).get("hatch", {}).get("version", {})
        if source.get("path") != "../../VERSION":
            problems.append(f"{dist}: [tool.hatch.version] path must be '../../VERSION'")
        if meta.get("license-files") != ["LICENSE"]:
            problems.append(f'{dist}: set `license-files = ["LICENSE"]`')
        if not (folder / "LICENSE").is_file() or (folder / "LICENSE").read_bytes() != license_text:
            problems.append(
                f"{dist}: LICENSE must be a copy of the root LICENSE (cp LICENSE {folder})"
            )
        missing = URL_KEYS - set(meta.get("urls", {}))
        if missing:
            problems.append(f"{dist}: [project.urls] lacks {sorted(missing)}")
        requirements = [*meta.get("dependencies", [])]
        for extra in meta.get("optional-dependencies", {}).values():
            requirements += extra
        for req in requirements:
            pin = re.fullmatch(r"(tensorsketch(?:-[a-z]+)?)(\[[^]]*\])?==(\S+)", req.strip())
            if pin and pin.group(3) != version:
                problems.append(f"{dist}: {req!r} is not pinned at {version} (/VERSION)")
    problems += _workspace_problems()
    if problems:
        pins = any("is not pinned" in problem for problem in problems)
        hint = " — `nox -s version -- X.Y.Z` rewrites the pins" if pins else ""
        session.error("; ".join(problems) + hint)
    session.log(f"sources: every distribution reads {version} from /VERSION, LICENSE copies OK")


def _requirement_name(requirement: str) -> str:
    """``"pytest>=8"`` -> ``"pytest"``, ``"tensorsketch-canvas[test]"`` -> its name."""
    return re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0]


def _workspace_problems() -> list[str]:
    """The root pyproject's uv workspace (`uv sync`, the development environment) must hold
    every distribution (a source for each, and each in the `dev` group) and every tool the
    integration session installs."""
    root = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    sources = root.get("tool", {}).get("uv", {}).get("sources", {})
    dev = root.get("dependency-groups", {}).get("dev", [])
    in_dev = {_requirement_name(req) for req in dev}
    problems = []
    for dist in DISTS:
        if sources.get(dist) != {"workspace": True}:
            problems.append(
                f"pyproject.toml: add `{dist} = {{ workspace = true }}` to [tool.uv.sources]"
            )
        if dist not in in_dev:
            problems.append(f"pyproject.toml: add {dist!r} to [dependency-groups] dev")
    for tool in INTEGRATION_TOOLS:
        name = _requirement_name(tool)
        if name not in in_dev:
            problems.append(f"pyproject.toml: add {name!r} to [dependency-groups] dev")
    return problems


def _check_version_and_license(session: nox.Session, dist: str, wheel: Path, sdist: Path) -> None:
    """Both artifacts carry /VERSION and the license; the wheel was built from the sdist (by
    `uv build`), i.e. away from the monorepo, so this also proves an sdist
    builds standalone with the right version."""
    version = _version()
    wheel_version = wheel.name.split("-")[1]
    sdist_version = sdist.name[: -len(".tar.gz")].rsplit("-", 1)[1]
    if {wheel_version, sdist_version} != {version}:
        session.error(f"{dist}: built {wheel.name} and {sdist.name}, but /VERSION says {version}")
    license_text = LICENSE.read_bytes()
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
        licenses = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        if not licenses or archive.read(licenses[0]) != license_text:
            session.error(f"{dist}'s wheel does not carry the Apache-2.0 LICENSE in .dist-info")
    with tarfile.open(sdist) as archive:
        base = sdist.name[: -len(".tar.gz")]
        member = archive.extractfile(f"{base}/LICENSE")
        if member is None or member.read() != license_text:
            session.error(f"{dist}'s sdist does not carry the LICENSE")
        pkg_info = archive.extractfile(f"{base}/PKG-INFO")
        sdist_metadata = pkg_info.read().decode() if pkg_info else ""
    for label, text in (("wheel", metadata.decode()), ("sdist", sdist_metadata)):
        if f"\nVersion: {version}\n" not in text:
            session.error(f"{dist}'s {label} metadata does not say Version: {version}")
        if "License-Expression: Apache-2.0" not in text:
            session.error(f"{dist}'s {label} metadata has no License-Expression: Apache-2.0")
        urls = {
            line.split(":", 1)[1].split(",")[0].strip()
            for line in text.splitlines()
            if line.startswith("Project-URL:")
        }
        if URL_KEYS - urls:
            session.error(f"{dist}'s {label} metadata lacks Project-URL {sorted(URL_KEYS - urls)}")
        for line in text.splitlines():
            pin = re.match(r"Requires-Dist: (tensorsketch(?:-[a-z]+)?)(\[[^]]*\])?==(\S+)", line)
            if pin and pin.group(3).rstrip(";") != version:
                session.error(f"{dist}'s {label} pins {line[15:]!r}, not /VERSION {version}")


def _check_plugin_template(session: nox.Session) -> None:
    """templates/plugin/ filled in by tools/new_plugin.py builds into a plugin wheel that
    registers in the `tensorsketch` entry-point group (the integration tests install it)."""
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "zeta-tensorsketch"
        session.run("python", str(ROOT / "tools" / "new_plugin.py"), "zeta", str(dest), silent=True)
        out = Path(tmp) / "dist"
        session.run("uv", "build", "--quiet", "--out-dir", str(out), str(dest), silent=True)
        wheels = list(out.glob("zeta_tensorsketch-*.whl"))
        if len(wheels) != 1:
            session.error(f"the plugin template built {sorted(out.iterdir())}, not one wheel")
        with zipfile.ZipFile(wheels[0]) as archive:
            names = archive.namelist()
            points = archive.read(next(n for n in names if n.endswith("entry_points.txt")))
        if "[tensorsketch]\nzeta = zeta_tensorsketch.plugin" not in points.decode():
            session.error(f"the plugin template's wheel does not register `zeta`: {points!r}")
        for needed in ("zeta_tensorsketch/plugin.py", "zeta_tensorsketch/py.typed"):
            if needed not in names:
                session.error(f"the plugin template's wheel lacks {needed}")
    session.log(f"templates/plugin: {wheels[0].name} registers in the `tensorsketch` group OK")


def _meta_requirement_problems(requires: list[str]) -> list[str]:
    """What the meta-package's Requires-Dist lacks, as readable sentences (empty when fine)."""
    from packaging.requirements import Requirement

    parsed = [Requirement(r) for r in requires]
    default = {r.name: r.extras for r in parsed if r.marker is None}
    problems = []
    for name in sorted(META_NEVER_DEFAULT & set(default)):
        problems.append(f"pulls {name} into the default install (it belongs in an extra)")
    for dist in DISTS:
        if dist in META_OPT_IN_DISTS:
            continue
        wanted = META_DEFAULT_EXTRAS.get(dist, set())
        if dist not in default or not wanted <= default[dist]:
            extras = f"[{','.join(sorted(wanted))}]" if wanted else ""
            problems.append(f"lacks {dist}{extras} in the default install")
    for extra, needs in META_OPT_IN.items():
        given = {
            r.name: r.extras
            for r in parsed
            if r.marker is not None and r.marker.evaluate({"extra": extra})
        }
        for name, extras in needs.items():
            if name not in given or not extras <= given[name]:
                extras_text = f"[{','.join(sorted(extras))}]" if extras else ""
                problems.append(f"lacks {name}{extras_text} in the [{extra}] extra")
    return problems


@nox.session
def build(session: nox.Session) -> None:
    """Build every distribution's wheel + sdist and check what they contain."""
    session.install("uv")
    _check_sources(session)
    root = ROOT / "dist"
    shutil.rmtree(root, ignore_errors=True)
    for dist in [*DISTS, META]:
        out = root / dist
        _build(session, dist, out)
        _check_artifacts(session, dist, out)
    _check_no_shared_files(session, root)
    _check_plugin_template(session)


def _check_no_shared_files(session: nox.Session, root: Path) -> None:
    """Fail when two wheels ship the same file: installing both, one silently overwrites
    the other (a plugin module in a namespace level two distributions share, say)."""
    owners: dict[str, list[str]] = {}
    for wheel in sorted(root.glob("*/*.whl")):
        for name in zipfile.ZipFile(wheel).namelist():
            if ".dist-info/" not in name:
                owners.setdefault(name, []).append(wheel.name)
    clashes = {name: dists for name, dists in owners.items() if len(dists) > 1}
    if clashes:
        lines = "; ".join(f"{name}: {', '.join(dists)}" for name, dists in sorted(clashes.items()))
        session.error(f"files shipped by more than one wheel: {lines}")
    session.log(f"{len(owners)} files across the wheels, none shipped twice")


@nox.session(python=False)
def version(session: nox.Session) -> None:
    """`nox -s version -- X.Y.Z`: write /VERSION and every first-party `==` pin to match."""
    if len(session.posargs) != 1 or not re.fullmatch(r"\d+\.\d+\.\d+\S*", session.posargs[0]):
        session.error(f"name the new version: nox -s version -- X.Y.Z (now {_version()})")
    new = session.posargs[0]
    VERSION_FILE.write_text(new + "\n", encoding="utf-8")
    pin = re.compile(r'("tensorsketch(?:-[a-z]+)?(?:\[[^]]*\])?==)[^"]+(")')
    for dist in [*DISTS, META]:
        path = PACKAGES / dist / "pyproject.toml"
        path.write_text(pin.sub(rf"\g<1>{new}\g<2>", path.read_text(encoding="utf-8")))
    session.log(f"/VERSION and the first-party pins now say {new}; add a CHANGELOG section")


@nox.session
def release(session: nox.Session) -> None:
    """`nox -s release -- <dist>`: build and check one distribution (no upload)."""
    if not session.posargs:
        session.error(f"name a distribution: nox -s release -- <{'|'.join([*DISTS, META])}>")
    dist = session.posargs[0]
    if dist not in [*DISTS, META]:
        session.error(f"unknown distribution {dist!r}; choose one of {[*DISTS, META]}")
    session.install("uv", "twine")
    out = ROOT / "dist" / "release" / dist
    shutil.rmtree(out, ignore_errors=True)
    _check_sources(session)
    artifacts = _build(session, dist, out)
    _check_artifacts(session, dist, out)
    session.run("twine", "check", "--strict", *map(str, artifacts))


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site (mkdocs-material, API reference from the docstrings by
    mkdocstrings) with warnings as errors. Offline: the sources are read statically from
    packages/*/src, so no distribution or SDK is installed here."""
    session.install("mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.27")
    session.run(
        "mkdocs",
        "build",
        "--strict",
        "--site-dir",
        str(ROOT / "site"),
        env={"NO_MKDOCS_2_WARNING": "1"},  # mkdocs-material's end-of-life banner
    )


STUDIO_WEB = PACKAGES / "tensorsketch-canvas" / "studio-web"


@nox.session(name="studio-build", python=False)
def studio_build(session: nox.Session) -> None:
    """The Studio's browser bundle (studio-web/ → canvas/studio/static/, committed).

    `nox -s studio-build` installs the pinned packages from the committed lockfile,
    type-checks, runs the unit tests of the page's pure modules (`node --test`) and rebuilds
    static/. `nox -s studio-build -- --check` (the default under CI) builds into memory and
    fails when the committed bundle differs from a fresh build. Without `npm` on the machine
    the session is skipped: the committed bundle is what `pip install` ships.
    """
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        session.skip("npm/node not found: the committed Studio bundle is not rebuilt or checked")
    check = "--check" in session.posargs or os.environ.get("CI", "").lower() in ("1", "true")
    session.chdir(STUDIO_WEB)
    session.run(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error", external=True)
    session.run(npm, "run", "typecheck", "--silent", external=True)
    session.run(npm, "test", "--silent", external=True)
    session.run("node", "build.mjs", *(["--check"] if check else []), external=True)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks side by side with LangGraph (installed from PyPI in this venv only)."""
    session.install("-r", str(ROOT / "benchmarks" / "requirements.txt"))
    # Every distribution a benchmark imports (canvas's test extra brings Playwright and httpx
    # for the Studio's browser benchmarks); bench.py refuses to start without the peers.
    wanted = [CORE, "tensorsketch-canvas[test]", "tensorsketch-backends[all]", "tensorsketch-serve"]
    wanted += ["tensorsketch-eval", "tensorsketch-ray"]
    session.install(*(arg for dist in wanted for arg in ("-e", str(PACKAGES) + "/" + dist)))
    session.run("python", str(ROOT / "benchmarks" / "bench.py"), *session.posargs)


@nox.session(python=False)
def demo(session: nox.Session) -> None:
    """The main job: the offline demo on embedded defaults (SQLite, FakeProvider)."""
    session.run(sys.executable, str(ROOT / "examples" / "demo.py"), external=True)
