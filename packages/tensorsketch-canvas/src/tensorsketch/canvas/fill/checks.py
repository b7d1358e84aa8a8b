"""Checking a candidate: mypy and the tests, each in a subprocess with a timeout.

The candidate never runs in this process. It is written to a scratch folder, and the
subprocesses see it in place of the real file: mypy through ``--shadow-file``, the tests
through an import hook that loads the candidate's text under the real module's name and path.
mypy's verdict is relative to the file as it is now: only errors the candidate adds count.
"""

from __future__ import annotations

import asyncio
import configparser
import importlib.util
import os
import re
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tensorsketch.canvas.fill.contract import contract_tests, module_name
from tensorsketch.canvas.fill.spec import HoleSpec

__all__ = ["CheckReport", "Checker", "missing_tools"]

#: What a failure report keeps of a subprocess's output (its end, where the verdict is).
OUTPUT_LIMIT = 4000

_REDIRECT = '''"""Load the candidate's text in place of the real module (a pytest plugin)."""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_ORIGINAL = os.path.realpath(os.environ["TS_FILL_ORIGINAL"])
_CANDIDATE = os.environ["TS_FILL_CANDIDATE"]


class _CandidateFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or not spec.origin or os.path.realpath(spec.origin) != _ORIGINAL:
            return None
        loader = importlib.machinery.SourceFileLoader(name, _CANDIDATE)
        return importlib.util.spec_from_file_location(name, _ORIGINAL, loader=loader)


sys.meta_path.insert(0, _CandidateFinder())
'''

_LINE = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?:\d+:)? error: (?P<msg>.*)$")


def missing_tools() -> list[str]:
    """The checkers' packages this environment lacks (the fill cannot verify without them)."""
    return [n for n in ("mypy", "pytest", "hypothesis") if importlib.util.find_spec(n) is None]


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= OUTPUT_LIMIT else "…" + text[-OUTPUT_LIMIT:]


def project_root(file: Path) -> Path:
    """The nearest folder above ``file`` with a pyproject.toml, setup.cfg or .git."""
    for folder in file.resolve().parents:
        if any((folder / m).exists() for m in ("pyproject.toml", "setup.cfg", ".git")):
            return folder
    return file.resolve().parent


def mypy_config(file: Path) -> Path | None:
    """The mypy configuration that governs ``file`` (``strict`` where the project is)."""
    for folder in file.resolve().parents:
        for name in ("mypy.ini", ".mypy.ini"):
            if (folder / name).is_file():
                return folder / name
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            try:
                data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError):
                data = {}
            if "mypy" in data.get("tool", {}):
                return pyproject
        setup = folder / "setup.cfg"
        if setup.is_file():
            parser = configparser.ConfigParser()
            try:
                parser.read(setup, encoding="utf-8")
            except configparser.Error:
                continue
            if parser.has_section("mypy"):
                return setup
        if any((folder / m).exists() for m in ("pyproject.toml", ".git")):
            return None
    return None


def user_tests(file: Path, node: str, skip: tuple[Path, ...] = ()) -> list[Path]:
    """The project's own test files that name ``node`` (a word match), at most 20; folders in
    ``skip`` (the fill's scratch folder) are not searched."""
    root = project_root(file)
    pattern = re.compile(rf"\b{re.escape(node)}\b")
    seen: list[Path] = []
    for folder in (root / "tests", root / "test", file.resolve().parent):
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.py")):
            name = path.name
            if not (name.startswith("test_") or name.endswith("_test.py")):
                continue
            if any(p.startswith(".") or p == "__pycache__" for p in path.parts) or any(
                path.resolve().is_relative_to(s) for s in skip
            ):
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if pattern.search(text) and path.resolve() not in seen:
                seen.append(path.resolve())
            if len(seen) >= 20:
                return seen
    return seen


@dataclass
class CheckReport:
    """What the checks found: ``failures`` is empty when the candidate passed them all."""

    failures: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


async def _run(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> tuple[int | None, str]:
    """``(exit status, output)``; the status is ``None`` when the process was killed on timeout."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:  # pragma: no cover - it ended on its own meanwhile
            pass
        await proc.wait()
        return None, ""
    return proc.returncode, out.decode("utf-8", "replace")


class Checker:
    """Runs every check of one hole's candidates, in subprocesses of ``python``.

    :param timeout: seconds each subprocess may take before it is killed (a failure).
    :param max_examples: hypothesis inputs drawn per candidate.
    :param workdir: a scratch folder for candidates, generated tests and mypy's cache.
    """

    def __init__(
        self,
        spec: HoleSpec,
        workdir: Path,
        *,
        python: str | None = None,
        timeout: float = 120.0,
        max_examples: int = 25,
        mypy_cache: Path | None = None,
    ) -> None:
        self.spec = spec
        self.file = spec.file.resolve()
        self.workdir = workdir
        self.python = python or sys.executable
        self.timeout = timeout
        self.max_examples = max_examples
        self.mypy_cache = mypy_cache or workdir / "mypy_cache"
        self.config = mypy_config(self.file)
        self._mypy_cwd = self.config.parent if self.config else self.file.parent
        self._baseline: Counter[str] | None = None

    def _env(self, candidate: Path) -> dict[str, str]:
        root, _ = module_name(self.file)
        path = os.pathsep.join(
            p for p in (str(self.workdir), str(root), os.environ.get("PYTHONPATH", "")) if p
        )
        return {
            **os.environ,
            "PYTHONPATH": path,
            "TS_FILL_ORIGINAL": str(self.file),
            "TS_FILL_CANDIDATE": str(candidate),
            "PYTHONDONTWRITEBYTECODE": "1",
        }

    # -- mypy ---------------------------------------------------------------------------------

    async def _mypy(self, candidate: Path | None) -> tuple[int | None, list[str]]:
        argv = [self.python, "-m", "mypy", "--no-color-output", "--show-error-codes"]
        argv += ["--no-error-summary", "--hide-error-context", "--cache-dir", str(self.mypy_cache)]
        if self.config is not None:
            argv += ["--config-file", str(self.config)]
        if candidate is not None:
            argv += ["--shadow-file", str(self.file), str(candidate)]
        argv.append(str(self.file))
        status, out = await _run(
            argv, cwd=self._mypy_cwd, env=self._env(candidate or self.file), timeout=self.timeout
        )
        return status, [line for line in out.splitlines() if _LINE.match(line)]

    @staticmethod
    def _key(line: str) -> str:
        match = _LINE.match(line)
        assert match is not None
        return f"{Path(match['file']).name}: {match['msg']}"

    async def mypy(self, candidate: Path, text: str) -> str | None:
        """What mypy newly reports with the candidate in place, or ``None``."""
        if self._baseline is None:
            status, lines = await self._mypy(None)
            if status is None:
                return f"mypy did not finish in {self.timeout:g} s on the file as it is now"
            self._baseline = Counter(self._key(line) for line in lines)
        status, lines = await self._mypy(candidate)
        if status is None:
            return f"mypy did not finish in {self.timeout:g} s"
        left = Counter(self._baseline)
        new: list[str] = []
        source = text.splitlines()
        for line in lines:
            key = self._key(line)
            if left[key] > 0:
                left[key] -= 1
                continue
            match = _LINE.match(line)
            assert match is not None
            number = int(match["line"])
            here = (self._mypy_cwd / match["file"]).resolve() == self.file
            shown = source[number - 1].strip() if here and 0 < number <= len(source) else ""
            new.append(f"{line}\n    {shown}" if shown else line)
        if not new:
            return None
        mode = f"with {self.config.name}" if self.config else "with mypy's defaults"
        return f"mypy ({mode}) rejects the module:\n" + "\n".join(new)

    # -- tests --------------------------------------------------------------------------------

    async def _pytest(
        self, args: list[str], *, cwd: Path, candidate: Path, plugins: bool = True
    ) -> tuple[int | None, str]:
        argv = [
            self.python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "_ts_fill_redirect",
        ]
        argv += ["--tb=short", "-x", *args]
        env = self._env(candidate)
        if not plugins:  # the generated tests need none: skip loading every installed plugin
            env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        return await _run(argv, cwd=cwd, env=env, timeout=self.timeout)

    async def contract(self, candidate: Path) -> str | None:
        """The generated contract tests' failure report, or ``None`` when they pass."""
        test = self.workdir / f"test_contract_{self.spec.node.lower()}.py"
        test.write_text(contract_tests(self.spec, max_examples=self.max_examples), encoding="utf-8")
        ini = self.workdir / "pytest.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")
        status, out = await self._pytest(
            ["-c", str(ini), "--rootdir", str(self.workdir), str(test)],
            cwd=self.workdir,
            candidate=candidate,
            plugins=False,
        )
        if status is None:
            return (
                f"the contract tests did not finish in {self.timeout:g} s (an endless loop? a "
                "blocking call?)"
            )
        if status == 0:
            return None
        return f"the contract tests failed (pytest exit {status}):\n{_tail(out)}"

    async def users(self, candidate: Path) -> tuple[str | None, list[Path]]:
        """The user's own tests naming the node: their failure report, or ``None``."""
        tests = user_tests(self.file, self.spec.node, (self.workdir.resolve(),))
        if not tests:
            return None, []
        root = project_root(self.file)
        status, out = await self._pytest([str(t) for t in tests], cwd=root, candidate=candidate)
        if status is None:
            return f"your tests naming {self.spec.node} did not finish in {self.timeout:g} s", tests
        if status in (0, 5):  # 5: nothing collected (every test deselected or skipped)
            return None, tests
        names = ", ".join(
            str(t.relative_to(root)) if t.is_relative_to(root) else str(t) for t in tests
        )
        return (
            f"your tests naming {self.spec.node} ({names}) failed (pytest exit {status}):\n"
            + _tail(out),
            tests,
        )

    def stage(self, text: str, attempt: int) -> Path:
        """Write the candidate module ``text`` (and the import hook) into the scratch folder."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "_ts_fill_redirect.py").write_text(_REDIRECT, encoding="utf-8")
        candidate = self.workdir / f"candidate_{attempt}_{self.file.name}"
        candidate.write_text(text, encoding="utf-8")
        return candidate

    async def check(self, text: str, attempt: int) -> CheckReport:
        """Run mypy, the contract tests and the user's tests on the module ``text``."""
        candidate = self.stage(text, attempt)
        report = CheckReport(passed=["parses", "signature"])
        problem = await self.mypy(candidate, text)
        if problem:
            report.failures.append(problem)
        else:
            report.passed.append("mypy")
        problem = await self.contract(candidate)
        if problem:
            report.failures.append(problem)
        else:
            report.passed.append("contract tests")
        if report.failures:  # the user's tests wait until the contract holds (they are slower)
            return report
        problem, tests = await self.users(candidate)
        if problem:
            report.failures.append(problem)
        elif tests:
            report.passed.append(f"your tests ({len(tests)} file{'s' if len(tests) != 1 else ''})")
        return report
