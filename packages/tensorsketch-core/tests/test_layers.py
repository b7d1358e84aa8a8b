"""The import layers (docs/architecture.md, "Layers"): a module imports only from its own layer
or below — type-only imports and imports inside functions included.

Read from the source trees with ``ast``, so nothing is imported and a new module that fits no
layer fails here until it is given one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[2]

#: Bottom up. A module's layer is the first entry whose prefix names it or a package above it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "vocabulary",
        (
            "tensorsketch._arguments",
            "tensorsketch._assignable",
            "tensorsketch.assistant_config",
            "tensorsketch._docstrings",
            "tensorsketch._fastmodel",
            "tensorsketch._install_hints",
            "tensorsketch._jsonschema",
            "tensorsketch._lone_surrogates",
            "tensorsketch.channels",
            "tensorsketch.constants",
            "tensorsketch.context",
            "tensorsketch.effect_calls",
            "tensorsketch.effect_keys",
            "tensorsketch.effects",
            "tensorsketch.errors",
            "tensorsketch.events",
            "tensorsketch.graph_structure",
            "tensorsketch.hookspecs",
            "tensorsketch.interrupts",
            "tensorsketch.joins",
            "tensorsketch.messages",
            "tensorsketch.name_registry",
            "tensorsketch.node",
            "tensorsketch.observability.propagation",
            "tensorsketch.observability.tracing",
            "tensorsketch.plugins",
            "tensorsketch.retry",
            "tensorsketch.runtime.allocator",
            "tensorsketch.runtime.inbox",
            "tensorsketch.runtime.loops",
            "tensorsketch.runtime.workers",
            "tensorsketch.schema",
            "tensorsketch.send",
            "tensorsketch.command",
            "tensorsketch.serializers",
            "tensorsketch.steering",
            "tensorsketch.suspension",
        ),
    ),
    (
        "durable",
        (
            "tensorsketch.cache",
            "tensorsketch.durable",
            "tensorsketch.memory",
            "tensorsketch.runtime",
            "tensorsketch.threads",
        ),
    ),
    (
        "engine",
        (
            "tensorsketch.compiled",
            "tensorsketch.executors",
            "tensorsketch.graph",
            "tensorsketch.handles",
            "tensorsketch.pregel",
        ),
    ),
    (
        "agents",
        (
            "tensorsketch._modelcall",
            "tensorsketch.agents",
            "tensorsketch.budget",
            "tensorsketch.chat",
            "tensorsketch.fake",
            "tensorsketch.guardrails",
            "tensorsketch.middleware",
            "tensorsketch.observability",
            "tensorsketch.patterns",
            "tensorsketch.pricing",
            "tensorsketch.provider",
            "tensorsketch.structured_output",
            "tensorsketch.tools",
            "tensorsketch.toolsets",
        ),
    ),
    ("runs", ("tensorsketch.runs",)),
    (
        "surfaces",
        (
            "tensorsketch._plugins",
            "tensorsketch.backend_urls",
            "tensorsketch.cli",
            "tensorsketch.doctor",
            "tensorsketch.registry",
            "tensorsketch.testing",
            # the other distributions: everything they add sits on top of core
            "tensorsketch.canvas",
            "tensorsketch.eval",
            "tensorsketch.interop",
            "tensorsketch.providers",
            "tensorsketch.ray",
            "tensorsketch.serve",
        ),
    ),
]
#: The root package re-exports the public API from every layer: the top of all of them.
ROOT = "tensorsketch"


def _layer(module: str) -> int | None:
    if module == ROOT:
        return len(LAYERS)
    best: tuple[int, int] | None = None  # (prefix length, layer): the longest prefix wins
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), rank)
    return None if best is None else best[1]


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for src in sorted(PACKAGES.glob("*/src")):
        for path in src.rglob("*.py"):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(module: str, path: Path, known: set[str]) -> list[tuple[int, str]]:
    """Every first-party module ``module`` imports (line, name), wherever the import is."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                out.append((node.lineno, name))
    return out


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in _modules() if _layer(m) is None)
    assert not unplaced, f"give these modules a layer in {__file__}: {unplaced}"


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    modules = _modules()
    known = set(modules)
    upward = []
    for module, path in sorted(modules.items()):
        own = _layer(module)
        if own is None:
            continue
        for line, target in _imports(module, path, known):
            theirs = _layer(target)
            if theirs is not None and theirs > own:
                names = [name for name, _ in LAYERS] + [ROOT]
                upward.append(
                    f"{path.relative_to(PACKAGES)}:{line} ({names[own]}) imports {target} "
                    f"({names[theirs]})"
                )
    assert not upward, "imports that climb a layer:\n" + "\n".join(upward)


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("tensorsketch.context", "vocabulary"),
        ("tensorsketch.durable.journal", "durable"),
        ("tensorsketch.durable.modes", "durable"),
        ("tensorsketch.runtime.backends.postgres", "durable"),
        ("tensorsketch.pregel.loop", "engine"),
        ("tensorsketch.agents.loop", "agents"),
        ("tensorsketch.agents.decomposed", "agents"),
        ("tensorsketch.observability.report", "agents"),
        ("tensorsketch.runs.runner", "runs"),
        ("tensorsketch.canvas.studio.app", "surfaces"),
    ],
)
def test_layer_lookup(module: str, layer: str) -> None:
    rank = _layer(module)
    assert rank is not None and LAYERS[rank][0] == layer
