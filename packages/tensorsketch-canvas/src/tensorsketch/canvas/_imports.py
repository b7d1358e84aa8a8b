"""Making sure generated code can run: adding missing names to ``from tensorsketch import``.

A stub needs ``Node``, ``Schema``, ``Context`` and ``Hole``; re-rendered wiring may use
``START``, ``END`` or ``Router``. Names the module already binds (imported from anywhere,
or defined) are left alone. The first ``from tensorsketch import ...`` line gets the missing
names — in sorted position when the line is sorted — or a new import line is added after the
module's imports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import libcst as cst

__all__ = [
    "add_missing",
    "bound_names",
    "find_import",
    "import_position",
    "import_statement",
    "with_names",
]


def _isort_key(name: str) -> tuple[int, str]:
    # ruff/isort "order by type": CONSTANTS, then Classes, then functions/variables.
    if name.isupper() and len(name) > 1:
        return 0, name
    if name[:1].isupper():
        return 1, name
    return 2, name


def bound_names(module: cst.Module) -> set[str] | None:
    """Names bound at module level; ``None`` when a star import may bind anything."""
    names: set[str] = set()
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef | cst.FunctionDef):
            names.add(stmt.name.value)
            continue
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.ImportFrom):
                if isinstance(small.names, cst.ImportStar):
                    return None
                for alias in small.names:
                    names.add(_alias_name(alias))
            elif isinstance(small, cst.Import):
                for alias in small.names:
                    names.add(_alias_name(alias).split(".")[0])
            elif isinstance(small, cst.Assign):
                for target in small.targets:
                    if isinstance(target.target, cst.Name):
                        names.add(target.target.value)
            elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                names.add(small.target.value)
    return names


def _alias_name(alias: cst.ImportAlias) -> str:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return cst.Module([]).code_for_node(alias.name)


def find_import(module: cst.Module) -> int | None:
    """Index of the first top-level ``from tensorsketch import a, b`` statement."""
    for index, stmt in enumerate(module.body):
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            continue
        small = stmt.body[0]
        if (
            isinstance(small, cst.ImportFrom)
            and not small.relative
            and isinstance(small.module, cst.Name)
            and small.module.value == "tensorsketch"
            and not isinstance(small.names, cst.ImportStar)
        ):
            return index
    return None


def with_names(stmt: cst.SimpleStatementLine, missing: Iterable[str]) -> cst.SimpleStatementLine:
    """The import statement with ``missing`` names added."""
    small = stmt.body[0]
    assert isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar)
    aliases = list(small.names)
    existing = [_alias_name(a) for a in aliases]
    ordered = existing == sorted(existing, key=_isort_key)
    for name in sorted(set(missing), key=_isort_key):
        alias = cst.ImportAlias(name=cst.Name(name))
        if ordered:
            keys = [_isort_key(_alias_name(a)) for a in aliases]
            at = next((i for i, k in enumerate(keys) if k > _isort_key(name)), len(aliases))
        else:
            at = len(aliases)
        aliases.insert(at, alias)
    separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    original = list(small.names)
    if len(original) > 1 and isinstance(original[0].comma, cst.Comma):
        separator = original[0].comma
    last = original[-1].comma if original else cst.MaybeSentinel.DEFAULT
    fixed = [a.with_changes(comma=separator) for a in aliases[:-1]]
    fixed.append(aliases[-1].with_changes(comma=last))
    return stmt.with_changes(body=[small.with_changes(names=fixed)])


def import_statement(names: Iterable[str]) -> cst.SimpleStatementLine:
    """A new ``from tensorsketch import ...`` line."""
    ordered = ", ".join(sorted(set(names), key=_isort_key))
    stmt = cst.parse_statement(f"from tensorsketch import {ordered}\n")
    assert isinstance(stmt, cst.SimpleStatementLine)
    return stmt


def import_position(module: cst.Module) -> int:
    """Where a new import goes: after the leading docstring and import statements."""
    position = 0
    for index, stmt in enumerate(module.body):
        if not isinstance(stmt, cst.SimpleStatementLine):
            break
        first = stmt.body[0]
        is_doc = (
            index == 0
            and isinstance(first, cst.Expr)
            and isinstance(first.value, cst.SimpleString | cst.ConcatenatedString)
        )
        if is_doc or isinstance(first, cst.Import | cst.ImportFrom):
            position = index + 1
            continue
        break
    return position


def add_missing(module: cst.Module, needs: set[str]) -> Callable[[cst.Module], cst.Module] | None:
    """A rewrite that imports whichever of ``needs`` the module does not bind; ``None`` when
    nothing is missing (or a star import may already bind them)."""
    bound = bound_names(module)
    if bound is None:
        return None
    missing = sorted(needs - bound)
    if not missing:
        return None
    position = find_import(module)
    if position is not None:
        old = module.body[position]
        assert isinstance(old, cst.SimpleStatementLine)
        new_line = with_names(old, missing)

        def fix(m: cst.Module) -> cst.Module:
            body = list(m.body)
            for i, stmt in enumerate(body):
                if stmt is old or (
                    isinstance(stmt, cst.SimpleStatementLine) and stmt.deep_equals(old)
                ):
                    body[i] = new_line
                    break
            return m.with_changes(body=body)

        return fix
    new_import = import_statement(missing)
    at = import_position(module)
    anchor = module.body[at - 1] if at > 0 else None

    def add(m: cst.Module) -> cst.Module:
        body = list(m.body)
        where = 0
        if anchor is not None:
            where = next((i + 1 for i, s in enumerate(body) if s is anchor), at)
        body.insert(where, new_import)
        return m.with_changes(body=body)

    return add
