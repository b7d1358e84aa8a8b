"""Registration by name, and laziness: listing names imports no SDK; a missing SDK says which
extra to install. Each check runs in a fresh interpreter, so earlier imports cannot hide a
leak."""

from __future__ import annotations

import json
import subprocess
import sys

from tensorsketch._plugins.providers import PROVIDERS, tensorsketch_providers

SDKS = ("anthropic", "openai", "google.genai", "litellm")


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_hook_returns_target_strings() -> None:
    assert tensorsketch_providers() == PROVIDERS
    assert set(PROVIDERS) == {"anthropic", "openai", "openai-responses", "google", "litellm"}
    assert all(isinstance(t, str) and ":" in t for t in PROVIDERS.values())


def test_listing_names_imports_no_sdk() -> None:
    out = _run(
        "import json, sys\n"
        "import tensorsketch\n"
        "from tensorsketch.registry import providers\n"
        "names = providers.names()\n"
        "paths = {n: providers.target_path(n) for n in names}\n"
        f"loaded = [m for m in {SDKS!r} if m in sys.modules]\n"
        "print(json.dumps({'names': names, 'paths': paths, 'loaded': loaded}))\n"
    )
    result = json.loads(out)
    assert {"anthropic", "openai", "google", "litellm"} <= set(result["names"])
    assert result["paths"]["openai"] == "tensorsketch.providers.openai:OpenAIProvider"
    assert result["loaded"] == []


def test_create_provider_imports_only_its_sdk() -> None:
    out = _run(
        "import json, sys\n"
        "from tensorsketch import create_provider\n"
        "p = create_provider('openai', model='gpt-4o', api_key='k')\n"
        f"loaded = [m for m in {SDKS!r} if m in sys.modules]\n"
        "print(json.dumps({'type': type(p).__name__, 'model': p.model, 'loaded': loaded}))\n"
    )
    assert json.loads(out) == {"type": "OpenAIProvider", "model": "gpt-4o", "loaded": ["openai"]}


def test_a_missing_sdk_names_the_extra_to_install() -> None:
    out = _run(
        "import sys\n"
        "sys.modules['anthropic'] = None  # as if the SDK were not installed\n"
        "from tensorsketch import create_provider\n"
        "try:\n"
        "    create_provider('anthropic', model='claude-sonnet-4-6', api_key='k')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert 'pip install "tensorsketch-providers[anthropic]"' in out
