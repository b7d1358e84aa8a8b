"""Reporter sinks: where eval records go. TensorSketch emits; you own the store.

A reporter is any object with ``emit(record)`` (sync or async) taking one plain-JSON dict:
a ``trial`` record per graded trial, a ``report`` record at the end of a suite, a
``drift_alert`` record from a :class:`~tensorsketch.eval.DriftMonitor`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import threading
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "CallbackReporter",
    "JsonlReporter",
    "MetricsReporter",
    "MultiReporter",
    "Reporter",
    "ScoreSink",
    "WebhookReporter",
    "deliver",
]


@runtime_checkable
class Reporter(Protocol):
    """One method: ``emit(record)``, sync or async."""

    def emit(self, record: dict[str, Any]) -> Awaitable[None] | None: ...


async def deliver(reporter: Any, record: dict[str, Any]) -> None:
    """Hand one record to a reporter, awaiting it when its ``emit`` is async."""
    result = reporter.emit(record)
    if inspect.isawaitable(result):
        await result


@runtime_checkable
class ScoreSink(Protocol):
    """Where a :class:`MetricsReporter` sends scores: ``score(name, value)``, e.g. the task
    API's ``tensorsketch.serve.RunMetrics`` (duck-typed: eval never imports serve)."""

    def score(self, name: str, value: float) -> None: ...


class MetricsReporter:
    """Feed each graded trial's scores to a metrics sink, one series per grader.

    ``OnlineMonitor(graders, reporter=MetricsReporter(metrics))`` puts the latest score of
    every grader on the task server's ``/metrics`` (``tensorsketch_score{name=...}``).
    Records other than ``trial`` pass through untouched.
    """

    def __init__(self, sink: ScoreSink) -> None:
        if not callable(getattr(sink, "score", None)):
            msg = (
                "MetricsReporter(sink) needs an object with score(name, value), such as "
                f"tensorsketch.serve.RunMetrics; got {sink!r}."
            )
            raise TypeError(msg)
        self.sink = sink

    def emit(self, record: dict[str, Any]) -> None:
        if record.get("type") != "trial":
            return
        for grade in record.get("grades") or ():
            self.sink.score(str(grade["grader"]), float(grade["score"]))


class JsonlReporter:
    """Append each record as one JSON line to ``path`` (flushed per record, jq-friendly).

    Records from concurrent trials never interleave within a line.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.parent.is_dir():
            msg = (
                f"JsonlReporter cannot write {str(self.path)!r}: the folder "
                f"{str(self.path.parent)!r} does not exist; create it first."
            )
            raise FileNotFoundError(msg)
        self._lock = threading.Lock()

    def emit(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, default=str, ensure_ascii=False)
        with self._lock, self.path.open("a", encoding="utf-8") as file:
            file.write(line + "\n")

    def read(self) -> list[dict[str, Any]]:
        """Every record written so far (convenient in tests and notebooks)."""
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def __repr__(self) -> str:
        return f"JsonlReporter({str(self.path)!r})"


class CallbackReporter:
    """Call ``fn(record)`` for each record; ``fn`` may be sync or async."""

    def __init__(self, fn: Callable[[dict[str, Any]], Any]) -> None:
        if not callable(fn):
            msg = f"CallbackReporter(fn) needs a callable taking one record, got {fn!r}."
            raise TypeError(msg)
        self.fn = fn

    async def emit(self, record: dict[str, Any]) -> None:
        result = self.fn(record)
        if inspect.isawaitable(result):
            await result


class MultiReporter:
    """Fan each record out to several reporters, in order (e.g. a store and a drift monitor)."""

    def __init__(self, *reporters: Any) -> None:
        for reporter in reporters:
            if not callable(getattr(reporter, "emit", None)):
                msg = (
                    f"MultiReporter takes reporters (objects with emit(record)), got {reporter!r}."
                )
                raise TypeError(msg)
        self.reporters = list(reporters)

    async def emit(self, record: dict[str, Any]) -> None:
        for reporter in self.reporters:
            await deliver(reporter, record)


class WebhookReporter:
    """POST each record as JSON to ``url`` (a pager, Slack-style hook, your alert router).

    ``only`` restricts it to record types (``only={"drift_alert"}`` for alerts only). The POST
    runs on a worker thread so the event loop never blocks; a failed delivery is counted in
    ``failed`` and raised only when ``raise_errors=True``.
    """

    def __init__(
        self,
        url: str,
        *,
        only: set[str] | frozenset[str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        raise_errors: bool = False,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            msg = f"WebhookReporter needs an http(s) URL, got {url!r}."
            raise ValueError(msg)
        self.url, self.only, self.timeout, self.raise_errors = url, only, timeout, raise_errors
        self.headers = {"Content-Type": "application/json", **dict(headers or {})}
        self.sent = 0
        self.failed = 0

    def _post(self, body: bytes) -> None:
        request = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            response.read()

    async def emit(self, record: dict[str, Any]) -> None:
        if self.only is not None and record.get("type") not in self.only:
            return
        body = json.dumps(record, default=str).encode()
        try:
            await asyncio.to_thread(self._post, body)
        except OSError:
            self.failed += 1
            if self.raise_errors:
                raise
            return
        self.sent += 1
