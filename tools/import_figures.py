"""Import figures of a source tree: cycles, imports inside functions, ``TYPE_CHECKING`` imports.

    python tools/import_figures.py [SRC ...] [--list]

SRC defaults to tensorsketch-core's sources. An edge is any import of a first-party module at
module level, including those under ``if TYPE_CHECKING:``; a cycle is a strongly connected set
of modules. An import inside a function "dodges a cycle" when the module it names reaches the
importing module again through module-level edges; a ``TYPE_CHECKING`` import "closes a cycle"
the same way. Reads the files with ``ast``: nothing is imported.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "packages" / "tensorsketch-core" / "src"


@dataclass
class Figures:
    modules: dict[str, Path] = field(default_factory=dict)
    edges: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    lazy: list[tuple[str, int, list[str]]] = field(default_factory=list)
    type_only: list[tuple[str, int, list[str]]] = field(default_factory=list)


def _module_name(src: Path, path: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _targets(figures: Figures, module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    is_package = figures.modules[module].name == "__init__.py"
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            anchor = package[: len(package) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        names = [f"{base}.{a.name}" for a in node.names]
    found = []
    for name in names:
        while name and name not in figures.modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.append(name)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def _walk(
    figures: Figures, module: str, body: list[ast.stmt], *, in_function: bool, typing: bool
) -> None:
    for stmt in body:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            targets = _targets(figures, module, stmt)
            if in_function:
                figures.lazy.append((module, stmt.lineno, targets))
            else:
                figures.edges[module].update(targets)
                if typing:
                    figures.type_only.append((module, stmt.lineno, targets))
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            _walk(figures, module, stmt.body, in_function=True, typing=typing)
        elif isinstance(stmt, ast.If) and _is_type_checking(stmt.test):
            _walk(figures, module, stmt.body, in_function=in_function, typing=True)
            _walk(figures, module, stmt.orelse, in_function=in_function, typing=typing)
        else:
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.stmt):
                    _walk(figures, module, [child], in_function=in_function, typing=typing)
                elif hasattr(child, "body") and isinstance(child.body, list):  # handlers
                    _walk(figures, module, child.body, in_function=in_function, typing=typing)


def collect(sources: list[Path]) -> Figures:
    figures = Figures()
    for src in sources:
        for path in sorted(src.rglob("*.py")):
            figures.modules[_module_name(src, path)] = path
    for module, path in figures.modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        _walk(figures, module, tree.body, in_function=False, typing=False)
    return figures


def cycles(figures: Figures) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in figures.modules:
        if root in index:
            continue
        work = [(root, iter(sorted(figures.edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(figures.edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def _reaches(figures: Figures, start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        current = todo.pop()
        if current == goal:
            return True
        for nxt in figures.edges[current] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", nargs="*", type=Path, default=[DEFAULT])
    parser.add_argument(
        "--list", action="store_true", help="list each lazy and TYPE_CHECKING import"
    )
    args = parser.parse_args(argv)
    figures = collect(args.src)
    groups = cycles(figures)
    dodging = [item for item in figures.lazy if any(_reaches(figures, t, item[0]) for t in item[2])]
    closing = [
        item for item in figures.type_only if any(_reaches(figures, t, item[0]) for t in item[2])
    ]
    print(f"modules: {len(figures.modules)}")
    print(f"import cycles: {len(groups)} (largest: {max(map(len, groups), default=0)} modules)")
    for group in groups:
        print(f"  {' <-> '.join(group)}")
    print(f"imports inside functions: {len(figures.lazy)}, dodging a cycle: {len(dodging)}")
    print(f"TYPE_CHECKING imports: {len(figures.type_only)}, closing a cycle: {len(closing)}")
    if args.list:
        for module, line, targets in figures.lazy:
            mark = "  (dodges a cycle)" if (module, line, targets) in dodging else ""
            print(f"  lazy {module}:{line} -> {', '.join(targets) or '(third party)'}{mark}")
        for module, line, targets in closing:
            print(f"  type-only, closes a cycle: {module}:{line} -> {', '.join(targets)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
