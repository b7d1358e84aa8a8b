"""With every distribution and SDK installed, importing and listing still imports none of them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

HEAVY = [
    "anthropic", "openai", "google.genai", "psycopg", "psycopg_pool", "redis", "starlette",
    "httpx", "mcp", "opentelemetry", "libcst", "uvicorn", "sqlite3", "ray",
]  # fmt: skip


def run_fresh(code: str) -> object:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_and_registry_listing_stay_light() -> None:
    result = run_fresh(
        f"""
        import json, sys
        import tensorsketch
        from tensorsketch.registry import providers, backends
        names = {{"providers": providers.names(), "backends": backends.names()}}
        for n in names["providers"]:
            providers.target_path(n)
        for n in names["backends"]:
            backends.target_path(n)
        names["loaded"] = [m for m in {HEAVY!r} if m in sys.modules]
        print(json.dumps(names))
        """
    )
    assert isinstance(result, dict)
    assert result["loaded"] == []
    assert {"anthropic", "openai", "google", "fake"} <= set(result["providers"])
    assert {"memory", "sqlite", "postgres", "redis"} <= set(result["backends"])


def test_first_use_loads_only_what_it_needs() -> None:
    result = run_fresh(
        f"""
        import json, sys
        from tensorsketch.runtime.backends import PostgresBackend
        loaded = [m for m in {HEAVY!r} if m in sys.modules]
        print(json.dumps({{"cls": PostgresBackend.__name__, "loaded": loaded}}))
        """
    )
    assert isinstance(result, dict)
    assert result["cls"] == "PostgresBackend"
    assert "anthropic" not in result["loaded"] and "openai" not in result["loaded"]


def test_the_ray_portion_imports_without_ray() -> None:
    result = run_fresh(
        f"""
        import json, sys
        import tensorsketch.ray, tensorsketch.ray.testing, tensorsketch._plugins.ray
        print(json.dumps({{"loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
        """
    )
    assert isinstance(result, dict)
    assert result["loaded"] == []
