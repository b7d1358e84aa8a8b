"""Name registries: built-ins by name, explicit overrides, errors that list known names."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from tensorsketch import (
    InMemoryBackend,
    RegistryError,
    create_backend,
    create_provider,
    register_backend,
    register_provider,
)
from tensorsketch.registry import backends, providers


@pytest.fixture
def clean_registries() -> Iterator[None]:
    before_p, before_b = dict(providers._explicit), dict(backends._explicit)
    yield
    providers._explicit.clear()
    providers._explicit.update(before_p)
    backends._explicit.clear()
    backends._explicit.update(before_b)


def test_core_names_are_listed() -> None:
    assert {"memory", "sqlite"} <= set(backends.names())
    assert "fake" in providers.names()


def test_create_backend_by_name() -> None:
    assert isinstance(create_backend("memory"), InMemoryBackend)


class AcmeProvider:
    def __init__(self, model: str = "m0") -> None:
        self.model = model


def test_register_class_and_thunk(clean_registries: None) -> None:
    register_provider("acme", AcmeProvider)
    made = create_provider("acme", model="m1")
    assert isinstance(made, AcmeProvider)
    assert made.model == "m1"
    register_provider("acme-lazy", lambda: AcmeProvider)
    assert create_provider("acme-lazy").model == "m0"
    register_provider("acme-path", "tests_registry_target:Thing")
    assert "acme-path" in providers.names()


def test_explicit_registration_overrides_an_installed_name(clean_registries: None) -> None:
    class MyMemory(InMemoryBackend):
        name = "my-memory"

    register_backend("memory", MyMemory)
    assert isinstance(create_backend("memory"), MyMemory)
    backends.unregister("memory")
    assert type(create_backend("memory")) is InMemoryBackend


def test_unknown_name_lists_known_names_and_suggests() -> None:
    with pytest.raises(RegistryError) as info:
        create_backend("sqlight")
    text = str(info.value)
    assert "unknown backend 'sqlight'" in text
    assert "Did you mean 'sqlite'?" in text
    assert "memory" in text
    assert "register_backend('sqlight', YourClass)" in text


def test_bad_registrations_are_rejected(clean_registries: None) -> None:
    with pytest.raises(TypeError, match="non-empty name"):
        register_provider("", AcmeProvider)
    with pytest.raises(TypeError, match="must be a class"):
        register_provider("x", 42)


def _fresh(code: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


HEAVY = [
    "anthropic", "openai", "google.genai", "psycopg", "psycopg_pool", "redis", "starlette",
    "httpx", "mcp", "opentelemetry", "libcst", "sqlite3", "uvicorn", "fastapi", "aiohttp",
]  # fmt: skip


def test_import_and_listing_import_no_sdk_or_driver() -> None:
    found = _fresh(
        f"""
        import json, sys
        import tensorsketch
        after_import = [m for m in {HEAVY!r} if m in sys.modules]
        from tensorsketch.registry import providers, backends
        names = (providers.names(), backends.names())
        for n in names[0]:
            providers.target_path(n)
        for n in names[1]:
            backends.target_path(n)
        after_listing = [m for m in {HEAVY!r} if m in sys.modules]
        print(json.dumps([after_import, after_listing, names]))
        """
    )
    after_import, after_listing, (provider_names, backend_names) = found
    assert after_import == []
    assert after_listing == []
    assert "fake" in provider_names
    assert "memory" in backend_names


def test_building_memory_backend_imports_no_driver() -> None:
    found = _fresh(
        f"""
        import json, sys
        from tensorsketch import create_backend
        create_backend("memory")
        print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
        """
    )
    assert found == []


# -- every hook spec is consumed, or reserved for the issue that consumes it ------------------


def test_every_hook_is_consumed_or_reserved() -> None:
    from tensorsketch import hookspecs

    consumed, reserved = set(hookspecs.CONSUMERS), set(hookspecs.RESERVED)
    assert not consumed & reserved
    assert consumed | reserved == set(hookspecs.ALL_SPECS)
    for name in reserved:  # the hook's own docstring says so too
        assert "Reserved" in (getattr(hookspecs, name).__doc__ or "")


def test_named_tracers_and_channel_types_take_effect() -> None:
    import asyncio
    import operator
    from typing import Annotated

    from tensorsketch import END, START, Context, Graph, Node, Schema, channel_marker, create_tracer
    from tensorsketch.observability.memory import InMemoryTracer
    from tensorsketch.registry import channel_types, tracers

    assert {"memory", "file"} <= set(tracers.names())
    assert {"reducer", "topic"} <= set(channel_types.names())
    tracer = create_tracer("memory")
    assert isinstance(tracer, InMemoryTracer)

    class Acc(Schema):
        total: Annotated[int, channel_marker("reducer", operator.add)] = 0

    class Add(Node):
        class In(Schema):
            pass

        class Out(Schema):
            total: int

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(total=5)

    app = Graph(Acc).add(Add).edge(START, "Add").edge("Add", END).compile()
    out = asyncio.run(app.invoke({"total": 1}, tracer=tracer))
    assert out.total == 6  # the named reducer folded the write
    assert any(span.name == "Add" for span in tracer.spans)
