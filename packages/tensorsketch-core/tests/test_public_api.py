"""Every lazily exported name resolves, and the type-checking re-exports cover them all."""

from __future__ import annotations

import ast
import contextlib
import importlib
from pathlib import Path

import pytest

import tensorsketch


@pytest.mark.parametrize("name", sorted(tensorsketch._LAZY))
def test_lazy_name_resolves(name: str) -> None:
    assert getattr(tensorsketch, name) is not None
    assert name in tensorsketch.__all__


def test_type_checking_block_reexports_every_lazy_name() -> None:
    tree = ast.parse(Path(tensorsketch.__file__).read_text())
    exported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    exported |= {a.asname for a in stmt.names if a.asname == a.name}
    missing = set(tensorsketch._LAZY) - exported
    assert not missing, f"add `from ... import X as X` under TYPE_CHECKING for {sorted(missing)}"


def test_the_exception_tree_in_errors_lists_every_exception() -> None:
    """errors.py's docstring is the map users read: no exception may be missing from it."""

    import tensorsketch.errors as errors

    modules = (
        "agents",
        "budget",
        "provider",
        "interrupts",
        "durable",
        "tools",
        "structured_output",
    )
    for module in modules:
        importlib.import_module(f"tensorsketch.{module}")
    # Other distributions' exceptions share the root; check those that are installed too.
    for module in ("tensorsketch.interop.mcp", "tensorsketch.serve", "tensorsketch.eval"):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)

    def walk(cls: type) -> list[type]:
        return [cls, *(sub for child in cls.__subclasses__() for sub in walk(child))]

    ours = [c for c in walk(errors.TensorSketchError) if c.__module__.startswith("tensorsketch.")]
    missing = [c.__name__ for c in ours if c.__name__ not in (errors.__doc__ or "")]
    assert not missing, f"add these to the tree in errors.py: {missing}"


def test_send_has_its_own_module_and_the_old_path_still_resolves() -> None:
    import tensorsketch.constants as constants
    import tensorsketch.send as send

    assert tensorsketch.Send is send.Send
    assert send.Send.__module__ == "tensorsketch.send"
    # Code (and saved type references) that named ``tensorsketch.constants.Send`` still work.
    assert constants.Send is send.Send
    from tensorsketch.constants import Send

    assert Send is send.Send
    assert "Send" not in constants.__all__
    with pytest.raises(AttributeError):
        _ = constants.Nope  # type: ignore[attr-defined]


def test_the_provider_seam_has_its_own_module_and_the_old_path_still_imports() -> None:
    import tensorsketch.chat as chat
    import tensorsketch.provider as provider

    assert tensorsketch.ChatProvider is provider.ChatProvider
    assert provider.Completion.__module__ == "tensorsketch.provider"
    # ``from tensorsketch.chat import ...`` (the former path) gives the same objects.
    assert chat.__all__ == provider.__all__
    for name in provider.__all__:
        assert getattr(chat, name) is getattr(provider, name), name


def test_the_rshift_surface_lives_in_handles() -> None:
    import tensorsketch.handles as handles

    assert tensorsketch.NodeHandle is handles.NodeHandle
    assert tensorsketch.Router is handles.Router


def test_only_the_engine_reaches_into_runs_and_contexts() -> None:
    """The agent layer, patterns and the rest use Context's public API (``ctx.effects``,
    ``ctx.next_key``, ``ctx.scoped``, ``ctx.run_nested``), never a run's internals."""
    import ast
    from pathlib import Path

    import tensorsketch

    root = Path(tensorsketch.__file__).parent
    engine = {"pregel.py", "context.py", "compiled.py", "durable.py", "effects.py"}
    private = {"_run", "_memo", "_calls", "_next_key", "journaled"}
    offenders = []
    for path in sorted(root.rglob("*.py")):
        if path.name in engine and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in private:
                value = node.value
                if not (isinstance(value, ast.Name) and value.id == "self"):
                    offenders.append(f"{path.relative_to(root)}:{node.lineno} .{node.attr}")
    assert not offenders, offenders
