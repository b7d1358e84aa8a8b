"""The pluggy plugin protocol: hook specs, loading, broken plugins, the CLI."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from importlib import metadata
from typing import Any

import pytest

from tensorsketch import PluginError, hookimpl
from tensorsketch import plugins as plugin_module
from tensorsketch.cli import CliCommand, main
from tensorsketch.hookspecs import ALL_SPECS
from tensorsketch.plugins import collect, get_plugin_manager, plugin_infos, reset_plugin_manager


@pytest.fixture
def fresh_manager() -> Iterator[None]:
    reset_plugin_manager()
    yield
    reset_plugin_manager()


def test_every_spec_is_documented_and_prefixed() -> None:
    import tensorsketch.hookspecs as specs

    for name in ALL_SPECS:
        fn = getattr(specs, name)
        assert name.startswith("tensorsketch_")
        assert (fn.__doc__ and ":return:" in fn.__doc__) or "versionadded" in (fn.__doc__ or "")


def test_core_registers_through_its_own_entry_point(fresh_manager: None) -> None:
    infos = {i.name: i for i in plugin_infos()}
    core = infos["core"]
    assert core.distribution == "tensorsketch-core"
    assert core.version == metadata.version("tensorsketch-core")
    assert {"tensorsketch_providers", "tensorsketch_backends", "tensorsketch_cli_commands"} <= set(
        core.hooks
    )


def test_collect_merges_and_keeps_the_first_on_a_clash(
    fresh_manager: None, caplog: pytest.LogCaptureFixture
) -> None:
    pm = get_plugin_manager()

    class Extra:
        @hookimpl
        def tensorsketch_backends(self) -> dict[str, str]:
            return {"memory": "elsewhere:Other", "extra": "x.y:Z"}

    pm.register(Extra(), name="extra-plugin")
    merged = collect("tensorsketch_backends")
    assert merged["memory"].plugin == "core"
    assert merged["extra"].plugin == "extra-plugin"
    assert "contributed by both 'core' and 'extra-plugin'" in caplog.text


def test_plugin_returning_the_wrong_type_is_named(fresh_manager: None) -> None:
    pm = get_plugin_manager()

    class Bad:
        @hookimpl
        def tensorsketch_providers(self) -> list[str]:
            return ["nope"]

    pm.register(Bad(), name="bad-plugin")
    with pytest.raises(
        PluginError, match="plugin 'bad-plugin' returned list from `tensorsketch_providers`"
    ):
        collect("tensorsketch_providers")


def test_broken_plugin_is_skipped_with_a_reason(
    fresh_manager: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = metadata.entry_points

    def fake_entry_points(**kw: Any) -> Any:
        found = list(real(**kw))
        if kw.get("group") == "tensorsketch":
            found.append(
                metadata.EntryPoint(name="broken", value="no_such_module_xyz", group="tensorsketch")
            )
        return found

    monkeypatch.setattr(plugin_module.metadata, "entry_points", fake_entry_points)
    infos = {i.name for i in plugin_infos()}
    assert "core" in infos and "broken" not in infos
    assert "ModuleNotFoundError" in plugin_module.failed_plugins()["broken"]
    assert "skipping TensorSketch plugin 'broken'" in caplog.text


def test_plugins_can_be_blocked_by_env(
    fresh_manager: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENSORSKETCH_DISABLE_PLUGINS", "core")
    assert "core" not in {i.name for i in plugin_infos()}


def test_cli_plugins_command(fresh_manager: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "core" in out and "tensorsketch-core" in out
    assert "tensorsketch_cli_commands" in out
    assert "Backends:" in out and "memory" in out


def test_cli_subcommand_from_a_plugin_and_clash(
    fresh_manager: None, capsys: pytest.CaptureFixture[str]
) -> None:
    pm = get_plugin_manager()
    calls: list[str] = []

    def run(args: Any) -> int:
        calls.append(args.who)
        return 3

    class Hello:
        @hookimpl
        def tensorsketch_cli_commands(self) -> list[CliCommand]:
            return [
                CliCommand(
                    name="hello",
                    help="say hello",
                    run=run,
                    configure=lambda p: p.add_argument("who"),
                )
            ]

    pm.register(Hello(), name="hello-plugin")
    assert main(["hello", "world"]) == 3
    assert calls == ["world"]
    pm.register(Hello(), name="hello-again")
    with pytest.raises(PluginError, match="'hello' is contributed by both plugins"):
        main(["hello", "x"])


def test_cli_without_a_command_prints_help(
    fresh_manager: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([]) == 2
    assert "plugins" in capsys.readouterr().out


def test_missing_documented_module_names_the_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulate an environment without the providers distribution: hide any real portion,
    # and its metadata (an installed distribution gets a different message).
    import importlib.metadata

    import tensorsketch

    real_version = importlib.metadata.version

    def version(dist: str) -> str:
        if dist == "tensorsketch-providers":
            raise importlib.metadata.PackageNotFoundError(dist)
        return real_version(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(tensorsketch, "__path__", list(tensorsketch.__path__)[:1])
    for name in [m for m in sys.modules if m.startswith("tensorsketch.providers")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ModuleNotFoundError) as info:
        __import__("tensorsketch.providers.anthropic")
    assert 'pip install "tensorsketch-providers' in str(info.value)


def test_unknown_attribute_and_lazy_names() -> None:
    import tensorsketch

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        tensorsketch.Nope  # noqa: B018
    assert "create_agent" in dir(tensorsketch)
    assert isinstance(tensorsketch.__version__, str)


def test_hookimpl_module_shape() -> None:
    mod = types.ModuleType("acme_plugin")

    @hookimpl
    def tensorsketch_providers() -> dict[str, str]:
        return {"acme": "acme:Provider"}

    mod.tensorsketch_providers = tensorsketch_providers  # type: ignore[attr-defined]
    pm = get_plugin_manager()
    pm.register(mod, name="acme-module")
    try:
        assert collect("tensorsketch_providers")["acme"].plugin == "acme-module"
    finally:
        pm.unregister(name="acme-module")
