"""``tensorsketch serve module:attr --protocol NAME --backend DSN``: run :func:`serve` on uvicorn.

The graph is named as ``module:attr`` or ``path/to/file.py:attr`` (:func:`load_graph`). Bound
to 127.0.0.1 unless ``--host`` says otherwise: exposing a graph (and the tools it may run) to
the network is a choice to make explicitly. Before uvicorn starts, a banner says what is
served where, on which backend and whether requests are authenticated; serving from memory
(no ``--backend``) is a warning, since every conversation and task is lost with the process.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import difflib
import hmac
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from tensorsketch.backend_urls import backend_label, open_backend, parse_backend_options
from tensorsketch.cli import load_graph, load_target, port
from tensorsketch.errors import RegistryError
from tensorsketch.serve._http import Authenticate
from tensorsketch.serve._protocols import Protocol, accepted_options, protocols, serve

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request

    from tensorsketch.runtime.backends.base import Backend

__all__ = ["configure", "load_graph", "run"]

#: uvicorn's log levels (``trace`` is its own, below ``debug``).
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        metavar="MODULE:ATTR",
        help="the compiled graph: `module:attr` or `path/to/file.py:attr`, e.g. app:agent",
    )
    parser.add_argument(
        "--protocol",
        action="append",
        metavar="NAME",
        help=f"a protocol to mount, repeatable ({', '.join(protocols.names())}, or all); "
        "default: openai",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    parser.add_argument("--port", type=port, default=8000, help="port 0-65535 (default 8000)")
    parser.add_argument("--model", help="the model id the OpenAI-compatible API reports")
    parser.add_argument(
        "--backend",
        metavar="DSN",
        help="where conversations, threads and tasks live: sqlite:///serve.db, "
        "postgresql://user@host/db, redis://host:6379/0, or a backend name; "
        "default: this process's memory (lost when it stops)",
    )
    parser.add_argument(
        "--backend-option",
        action="append",
        metavar="KEY=VALUE",
        help="an option for the backend, repeatable (schema=tenant1 for PostgreSQL, "
        "prefix=app for Redis)",
    )
    parser.add_argument(
        "--deps",
        metavar="MODULE:FACTORY",
        help="a zero-argument function (`module:attr` or `path/to/file.py:attr`) called once "
        "at startup; what it returns is every run's `ctx.deps` (a database pool, a client)",
    )
    parser.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="require `Authorization: Bearer <key>` on every request, the key read from the "
        "environment variable NAME (default: no authentication)",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="uvicorn's and tensorsketch's log level (default info)",
    )


def _unknown_protocol(requested: list[str]) -> str | None:
    """What is wrong with the ``--protocol`` names, before the graph is imported."""
    known = protocols.names()
    for name in requested:
        if name != "all" and name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return (
                f"unknown protocol {name!r}{hint}; --protocol takes one of "
                f"{', '.join(known)}, or all."
            )
    return None


#: How long the check that ``--backend`` answers may take before the command gives up.
PROBE_SECONDS = 15.0


def _open_backend(args: argparse.Namespace) -> Backend | None:
    """The ``--backend`` store (``None`` without one), checked to answer; a ``ValueError``
    says what failed, never showing the DSN (it may hold a password)."""
    if not args.backend:
        return None
    try:
        options = parse_backend_options(args.backend_option)
        # In a thread of its own: a caller already inside an event loop (a test, a
        # notebook) cannot asyncio.run here.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, _probe(args.backend, options)).result()
        return open_backend(args.backend, options)
    except Exception as exc:
        kind = str(args.backend).partition("://")[0]
        text = str(exc).replace(str(args.backend), f"<{kind} URL>")
        if isinstance(exc, TimeoutError):
            text = f"it did not answer within {PROBE_SECONDS:g} s"
        msg = f"--backend ({kind}) could not be opened: {text}"
        raise ValueError(msg) from None


async def _probe(url: str, options: dict[str, Any]) -> None:
    """Read from the store once, so one that cannot be reached (a missing folder, a refused
    connection) stops the command instead of answering every request 503. A store of its
    own, closed here: the served one's connections belong to the server's event loop."""
    store = open_backend(url, options)
    try:
        await asyncio.wait_for(store.latest_checkpoint("tensorsketch-serve-probe"), PROBE_SECONDS)
    finally:
        await store.aclose()


def _bearer(variable: str | None) -> Authenticate | None:
    """``authenticate`` for ``--api-key-env``: the key in ``$variable`` as a bearer token."""
    if variable is None:
        return None
    key = os.environ.get(variable, "")
    if not key:
        msg = (
            f"--api-key-env {variable}: the environment variable {variable} is not set (or "
            f"empty); export the key first, e.g. `export {variable}=$(openssl rand -hex 24)`."
        )
        raise ValueError(msg)
    expected = f"Bearer {key}".encode()

    def authenticate(request: Request) -> bool:
        given = request.headers.get("authorization", "").encode()
        return hmac.compare_digest(given, expected)

    return authenticate


def _unguarded(names: list[str]) -> str | None:
    """With ``--api-key-env``, a protocol that takes no ``authenticate`` would serve the graph
    to anyone beside the guarded ones: refuse, naming it."""
    for name in names:
        taken = accepted_options(protocols.resolve(name))
        if taken is not None and "authenticate" not in taken:
            return (
                f"--api-key-env: protocol {name!r} takes no `authenticate=`, so it would be "
                "served without a key; leave it out of --protocol, or serve it in its own "
                "process behind a proxy that checks a key."
            )
    return None


def banner(args: argparse.Namespace, names: list[str], store: Backend | None) -> list[str]:
    """What the server says before it starts: each protocol and its URLs, the backend, auth."""
    host = f"[{args.host}]" if ":" in args.host else args.host
    base = f"http://{host}:{args.port if args.port else '<any free port>'}"
    rows: list[tuple[str, str]] = []
    for name in names:
        found = protocols.resolve(name)
        path = found.path.rstrip("/") if isinstance(found, Protocol) else f"/{name}"
        ends = found.endpoints if isinstance(found, Protocol) and found.endpoints else ("",)
        rows.append((name, "  ".join(f"{path}{end}" or "/" for end in ends)))
    if store is None or store.name == "memory":
        rows.append(("backend", "memory (this process only)"))
    else:
        rows.append(("backend", f"{store.name} ({backend_label(args.backend, store)})"))
    if getattr(args, "deps", None):
        rows.append(("deps", f"{args.deps}() (ctx.deps of every run)"))
    if args.api_key_env:
        rows.append(("auth", f"on: Authorization: Bearer ${args.api_key_env}"))
    else:
        rows.append(("auth", "off: anyone who can reach the server can run the graph"))
    width = max(len(label) for label, _ in rows)
    head = f"tensorsketch serve: {args.target} at {base}"
    return [head, *(f"  {label.ljust(width)}  {text}" for label, text in rows)]


MEMORY_WARNING = (
    "tensorsketch serve: warning: serving from memory, so conversations and tasks are lost "
    "when this process stops; pass --backend sqlite:///serve.db (or postgresql://..., "
    "redis://...) to keep them."
)


def closing(app: Starlette, store: Backend) -> Starlette:
    """``app``, closing ``store`` (its connections, its pool) once the app has shut down: the
    protocols' own shutdown (the task runner draining) may still write to it."""
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(scope_app: Any) -> AsyncIterator[None]:
        try:
            async with inner(scope_app):
                yield
        finally:
            await store.aclose()

    app.router.lifespan_context = lifespan
    return app


def _log_level(level: str) -> None:
    """Let tensorsketch's own loggers speak at ``level`` beside uvicorn's."""
    logger = logging.getLogger("tensorsketch")
    logger.setLevel(logging.DEBUG if level == "trace" else level.upper())
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
        logger.addHandler(handler)


def _make_deps(target: str) -> Any:
    """Call ``--deps``'s factory once; a ``ValueError`` says what is wrong with it."""
    factory = load_target(target, unimportable="check the name or cd.")
    if not callable(factory):
        msg = (
            f"--deps {target} is a {type(factory).__name__}, not a function; point at a "
            "zero-argument function that returns the dependencies (def make_deps(): ...)."
        )
        raise ValueError(msg)
    try:
        return factory()
    except TypeError as exc:
        msg = f"--deps {target} must take no arguments: {exc}"
        raise ValueError(msg) from exc


def run(args: argparse.Namespace) -> int:
    import uvicorn  # noqa: PLC0415 - uvicorn loads when the server starts

    requested = args.protocol or ["openai"]
    problem = _unknown_protocol(requested)
    if problem is not None:
        print(f"tensorsketch serve: {problem}", file=sys.stderr)
        return 2
    names = protocols.names() if "all" in requested else list(dict.fromkeys(requested))
    problem = _unguarded(names) if args.api_key_env else None
    if problem is not None:
        print(f"tensorsketch serve: {problem}", file=sys.stderr)
        return 2
    try:
        authenticate = _bearer(args.api_key_env)
        graph = load_graph(args.target)
        store = _open_backend(args)
        options: dict[str, Any] = {"model": args.model} if args.model else {}
        if store is not None:
            options["backend"] = store
        if authenticate is not None:
            options["authenticate"] = authenticate
        if args.deps:
            options["deps"] = _make_deps(args.deps)
        app = serve(graph, requested, **options)
        if store is not None:
            app = closing(app, store)
    except (ValueError, TypeError, RegistryError) as exc:
        print(f"tensorsketch serve: {exc}", file=sys.stderr)
        return 2
    print("\n".join(banner(args, names, store)), file=sys.stderr, flush=True)
    if store is None or store.name == "memory":
        print(MEMORY_WARNING, file=sys.stderr, flush=True)
    _log_level(args.log_level)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
