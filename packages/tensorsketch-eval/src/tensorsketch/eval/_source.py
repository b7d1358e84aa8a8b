"""An agent's prompt in its source file: found, rewritten and loaded through libcst.

The prompt is the string literal an agent's ``system=`` keyword gets — written in the call,
or a module-level constant the call names (``system=INSTRUCTIONS``) — or, with ``variable=``,
any module-level string constant. A rewrite replaces exactly that literal; every other byte of
the file stays as it was. Candidates are evaluated by running the rewritten source, so what
was scored is what ``--write`` writes.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorsketch.eval._program import Program
from tensorsketch.eval._prompt import Prompt
from tensorsketch.eval.exceptions import EvalError

__all__ = ["PromptSource", "string_literal"]

_loads = itertools.count(1)


def _controls(text: str, keep: str) -> str:
    """Escape control characters other than those in ``keep`` (a literal must not hold a
    raw carriage return or NUL; a newline stays raw in a triple-quoted one)."""
    return "".join(
        ch if ch in keep or (ch >= " " and ch != "\x7f") else repr(ch)[1:-1] for ch in text
    )


def string_literal(text: str, *, triple: bool = False) -> str:
    """Python source for ``text`` as a double-quoted literal: triple-quoted when it spans
    lines (or ``triple``), so a long prompt reads as prose in the file."""
    body = text.replace("\\", "\\\\")
    if "\n" not in text and not triple:
        return '"' + _controls(body.replace('"', '\\"'), "\t") + '"'
    body = _controls(body.replace('"""', '\\"\\"\\"'), "\t\n")
    if body.endswith('"'):
        body = body[:-1] + '\\"'
    return f'"""{body}"""'


@dataclass(frozen=True, slots=True)
class _Site:
    node: Any  # the libcst string node that holds the prompt
    text: str
    line: int
    label: str


def _string_value(node: Any) -> str | None:
    import libcst as cst  # noqa: PLC0415 - only the optimizer needs libcst

    if isinstance(node, cst.SimpleString | cst.ConcatenatedString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _constants(module: Any) -> dict[str, Any]:
    """The module-level ``NAME = value`` assignments: name -> value node."""
    import libcst as cst  # noqa: PLC0415 - only the optimizer needs libcst

    constants: dict[str, Any] = {}
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target, value = small.targets[0].target, small.value
            elif isinstance(small, cst.AnnAssign) and small.value is not None:
                target, value = small.target, small.value
            else:
                continue
            if isinstance(target, cst.Name):
                constants[target.value] = value

    return constants


def _find_sites(module: Any, variable: str | None) -> tuple[list[_Site], list[str]]:
    """The prompt literals (deduplicated) and the ``system=`` values that are not literals."""
    import libcst as cst  # noqa: PLC0415 - only the optimizer needs libcst
    from libcst.metadata import MetadataWrapper, PositionProvider  # noqa: PLC0415 - as above

    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    constants = _constants(module)

    def line(node: Any) -> int:
        return int(positions[node].start.line)

    sites: dict[int, _Site] = {}
    unusable: list[str] = []
    if variable is not None:
        value = constants.get(variable)
        if value is None:
            msg = (
                f"no module-level `{variable} = ...` assignment; --prompt names a module-level "
                "string constant holding the agent's instructions."
            )
            raise EvalError(msg)
        text = _string_value(value)
        if text is None:
            msg = (
                f"`{variable}` (line {line(value)}) is not a plain string literal; the optimizer "
                "rewrites a literal, so give it one (no f-string, no call)."
            )
            raise EvalError(msg)
        return [_Site(value, text, line(value), f"`{variable} = ...` at line {line(value)}")], []

    class Finder(cst.CSTVisitor):
        def visit_Arg(self, node: cst.Arg) -> None:
            if node.keyword is None or node.keyword.value != "system":
                return
            value = node.value
            text = _string_value(value)
            if text is not None:
                sites[id(value)] = _Site(
                    value, text, line(value), f"`system=` at line {line(value)}"
                )
                return
            if isinstance(value, cst.Name) and value.value in constants:
                held = constants[value.value]
                text = _string_value(held)
                if text is not None:
                    label = (
                        f"`{value.value} = ...` at line {line(held)} "
                        f"(the `system=` at line {line(value)})"
                    )
                    sites.setdefault(id(held), _Site(held, text, line(held), label))
                    return
            unusable.append(f"line {line(value)}")

    wrapper.module.visit(Finder())
    return sorted(sites.values(), key=lambda s: s.line), unusable


class PromptSource:
    """The prompt of the agent ``attr`` defined in the Python file ``path``.

    :param variable: the module-level string constant that holds the prompt, when the file has
        more than one ``system=`` literal (or none).
    :raises EvalError: the file has no such literal, or several and no ``variable``.
    """

    def __init__(
        self, path: str | Path, attr: str = "agent", *, variable: str | None = None
    ) -> None:
        import libcst as cst  # noqa: PLC0415 - only the optimizer needs libcst

        self.path = Path(path).resolve()
        if not self.path.is_file():
            msg = f"no Python file at {str(path)!r}."
            raise EvalError(msg)
        self.attr = attr
        self.source = self.path.read_text(encoding="utf-8")
        try:
            self._module = cst.parse_module(self.source)
        except cst.ParserSyntaxError as exc:
            msg = f"{self.path} does not parse: {exc}"
            raise EvalError(msg) from exc
        sites, unusable = _find_sites(self._module, variable)
        if not sites:
            hint = (
                f" (the `system=` at {', '.join(unusable)} is not a string literal)"
                if unusable
                else ""
            )
            msg = (
                f"found no prompt to optimize in {self.path.name}{hint}: give the agent its "
                'instructions as a literal, `create_agent(model, system="...")`, or as a '
                "module-level constant it names, and pass --prompt NAME for a constant."
            )
            raise EvalError(msg)
        if len(sites) > 1:
            listed = "; ".join(site.label for site in sites)
            msg = (
                f"{self.path.name} has {len(sites)} prompts ({listed}); choose one with "
                "--prompt NAME (variable=NAME), naming a module-level string constant."
            )
            raise EvalError(msg)
        self._site = sites[0]
        #: The prompt as the file has it now.
        self.prompt = Prompt.parse(self._site.text)

    @classmethod
    def from_spec(cls, spec: str, *, variable: str | None = None) -> PromptSource:
        """``"path/to/agent.py:agent"`` (the agent's file and the name it is bound to)."""
        where, colon, attr = spec.rpartition(":")
        if not colon or not where.endswith(".py") or not attr:
            msg = f"agent spec {spec!r} needs the form 'path/to/file.py:attribute'."
            raise EvalError(msg)
        return cls(where, attr, variable=variable)

    @property
    def where(self) -> str:
        """Where the prompt is, for messages (``"`system=` at line 12"``)."""
        return self._site.label

    def apply(self, prompt: Prompt) -> str:
        """The file's source with ``prompt`` in place of the current one."""
        import libcst as cst  # noqa: PLC0415 - only the optimizer needs libcst

        if prompt == self.prompt:
            return self.source
        target = self._site.node
        triple = isinstance(target, cst.SimpleString) and target.quote in ('"""', "'''")
        text = prompt.render()
        replacement = cst.parse_expression(string_literal(text, triple=triple))

        class Swap(cst.CSTTransformer):
            def on_leave(self, original: Any, updated: Any) -> Any:
                return replacement if original is target else updated

        return str(self._module.visit(Swap()).code)

    def diff(self, prompt: Prompt) -> str:
        """A unified diff from the file as it is to the file with ``prompt``."""
        name = self.path.name
        return "".join(
            difflib.unified_diff(
                self.source.splitlines(keepends=True),
                self.apply(prompt).splitlines(keepends=True),
                f"a/{name}",
                f"b/{name}",
            )
        )

    def write(self, prompt: Prompt) -> bool:
        """Write ``prompt`` into the file; ``False`` when it is already there.

        :raises EvalError: the file changed since it was read (nothing is overwritten).
        """
        now = self.path.read_text(encoding="utf-8")
        if now != self.source:
            msg = (
                f"{self.path} changed since the optimization read it; nothing was written. Run "
                "the optimization again on the current file."
            )
            raise EvalError(msg)
        new = self.apply(prompt)
        if new == self.source:
            return False
        self.path.write_text(new, encoding="utf-8")
        return True

    def load(self, prompt: Prompt | None = None) -> Any:
        """Run the file (with ``prompt`` in place, if given) as a fresh module; return its
        ``attr``. The file on disk is not touched."""
        code = self.apply(prompt) if prompt is not None else self.source
        digest = hashlib.sha1(str(self.path).encode()).hexdigest()[:10]
        name = f"tensorsketch_optimize_{digest}_{next(_loads)}"
        module = types.ModuleType(name)
        module.__file__ = str(self.path)
        folder = str(self.path.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        sys.modules[name] = module  # dataclasses and schemas look their module up by name
        try:
            exec(compile(code, str(self.path), "exec"), module.__dict__)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        found: Any = module
        for part in self.attr.split("."):
            try:
                found = getattr(found, part)
            except AttributeError:
                msg = f"{self.path.name} has no attribute {self.attr!r}."
                raise EvalError(msg) from None
        return found

    def program(self) -> Program:
        """The :class:`Program` whose agents are this file run with each prompt."""
        return Program(self.prompt, self.load)
