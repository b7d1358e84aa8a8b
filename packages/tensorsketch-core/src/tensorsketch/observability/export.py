"""Exporters that need nothing beyond the standard library: a JSON Lines file and an HTTP feed.

``FileTracer`` writes one JSON object per span as the span closes (flushed, so a crash keeps
everything up to it). ``http_span_sink(url)`` is a ``Callable[[Span], None]`` for
``MultiTracer`` that POSTs finished spans from a background thread; it never blocks the run
and drops spans when its bounded queue is full or nobody is listening.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import queue
import threading
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import urlsplit

from tensorsketch.observability.tracing import RecordingTracer, Span

__all__ = ["FileTracer", "HttpSpanSink", "http_span_sink", "span_json"]

_log = logging.getLogger("tensorsketch.observability")


def _json_default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # pydantic models (tool arguments, structured output)
        return dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return repr(value)


def span_json(span: Span) -> str:
    """One span as a single JSON line (values JSON cannot hold are written as text)."""
    return json.dumps(span.to_dict(), default=_json_default, ensure_ascii=False)


class FileTracer(RecordingTracer):
    """Streams one JSON object per span to a file as each span closes (JSON Lines).

    Use it as a context manager (``with FileTracer("run.jsonl") as tracer:``) or call
    :meth:`close`. Each line is ``Span.to_dict()``; read a file back with
    ``Trace.load(path)`` or ``tensorsketch trace report path``.

    :param path: the file to write, or an open text stream (left open on :meth:`close`).
    :param append: add to an existing file instead of starting it afresh.
    :param traceparent: join a caller's trace (see :class:`RecordingTracer`).
    :param capture_content: also write model calls' prompts and replies (see
        :class:`RecordingTracer`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | IO[str],
        *,
        append: bool = False,
        traceparent: str | None = None,
        capture_content: bool = False,
    ) -> None:
        super().__init__(traceparent=traceparent, capture_content=capture_content)
        self._lock = threading.Lock()
        if isinstance(path, str | os.PathLike):
            self.path: Path | None = Path(path)
            try:
                self._file: IO[str] = self.path.open("a" if append else "w", encoding="utf-8")
            except FileNotFoundError:
                msg = (
                    f"FileTracer cannot create {str(self.path)!r}: the folder "
                    f"{str(self.path.parent)!r} does not exist; create it first."
                )
                raise FileNotFoundError(msg) from None
            self._owns_file = True
        else:
            self.path = None
            self._file = path
            self._owns_file = False
        self._closed = False
        self.written = 0

    def _record(self, span: Span) -> None:
        line = span_json(span)
        with self._lock:
            if self._closed:
                where = str(self.path) if self.path is not None else "its stream"
                msg = (
                    f"FileTracer for {where!r} is closed, so span {span.name!r} was not "
                    "written; open a new FileTracer (or use it as `with FileTracer(...)` around "
                    "the whole run)."
                )
                raise ValueError(msg)
            self._file.write(line + "\n")
            self._file.flush()
            self.written += 1

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Flush and close the file (a stream passed in is flushed, not closed)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._file.flush()
            if self._owns_file:
                self._file.close()

    def __enter__(self) -> FileTracer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# -- the HTTP feed ---------------------------------------------------------------------------

_STOP = object()


class _SpanSender:
    """The background half of an :class:`HttpSpanSink`: the thread that POSTs span batches
    (kept apart so the sink can be garbage-collected while the thread runs)."""

    def __init__(
        self,
        url: str,
        *,
        max_queue: int,
        batch_size: int,
        timeout: float,
        headers: dict[str, str],
    ) -> None:
        parts = urlsplit(url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=max_queue)
        self.batch_size = batch_size
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json", **headers}
        self.sent = 0
        self.dropped = 0
        self.failed = 0
        self.retry_at = 0.0
        self.backoff = 0.0
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def start(self) -> None:
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self.loop, name="tensorsketch-span-sink", daemon=True
                )
                self.thread.start()

    def loop(self) -> None:
        while True:
            first = self.queue.get()
            batch: list[Any] = [first]
            while len(batch) < self.batch_size:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(item is _STOP for item in batch)
            spans = [item for item in batch if item is not _STOP]
            try:
                if spans:
                    self.deliver(spans)
            finally:
                for _ in batch:
                    self.queue.task_done()
            if stop:
                return

    def deliver(self, spans: list[str]) -> None:
        if time.monotonic() < self.retry_at:
            self.dropped += len(spans)  # the endpoint was down moments ago: don't wait on it
            return
        body = ('{"spans": [' + ", ".join(spans) + "]}").encode("utf-8")
        connection_type = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        connection = connection_type(self.host, self.port, timeout=self.timeout)
        try:
            connection.request("POST", self.target, body=body, headers=self.headers)
            response = connection.getresponse()
            response.read()
            ok = 200 <= response.status < 300
        except (OSError, http.client.HTTPException):
            ok = False
        finally:
            connection.close()
        if ok:
            self.sent += len(spans)
            self.backoff = 0.0
            self.retry_at = 0.0
        else:
            self.failed += len(spans)
            self.backoff = min(max(self.backoff * 2, 0.25), 5.0)
            self.retry_at = time.monotonic() + self.backoff

    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        done = self.queue.all_tasks_done
        with done:
            while self.queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                done.wait(remaining)
        return True

    def close(self, timeout: float) -> None:
        if self.thread is None:
            return
        self.flush(timeout)
        try:
            self.queue.put_nowait(_STOP)
        except queue.Full:
            return  # a daemon thread; it dies with the process


class HttpSpanSink:
    """A non-blocking span feed; build it with :func:`http_span_sink`.

    Calling it with a span serializes the span and puts it on a bounded queue (it never
    waits); a daemon thread POSTs batches as ``{"spans": [span.to_dict(), ...]}``. A full
    queue, a refused connection or a non-2xx answer drops spans and counts them; after a
    failure the thread backs off (up to 5 s) before trying the endpoint again.
    """

    def __init__(
        self,
        url: str,
        *,
        max_queue: int = 1024,
        batch_size: int = 64,
        timeout: float = 2.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            msg = (
                f"http_span_sink(url) needs an http:// or https:// URL with a host, got "
                f"{url!r}; for example 'http://127.0.0.1:8765/api/trace'."
            )
            raise ValueError(msg)
        if max_queue < 1 or batch_size < 1:
            msg = (
                f"http_span_sink needs max_queue >= 1 and batch_size >= 1, got "
                f"max_queue={max_queue!r}, batch_size={batch_size!r}."
            )
            raise ValueError(msg)
        self.url = url
        self._sender = _SpanSender(
            url, max_queue=max_queue, batch_size=batch_size, timeout=timeout, headers=headers or {}
        )
        self._closed = False
        self._rejected = 0  # counted on the caller's side; the sender counts its own drops
        weakref.finalize(self, self._sender.close, 1.0)

    def __call__(self, span: Span) -> None:
        sender = self._sender
        if self._closed:
            self._rejected += 1
            return
        try:
            # serialized here, on the caller's thread: the span is never shared across threads
            sender.queue.put_nowait(span_json(span))
        except queue.Full:
            self._rejected += 1
            return
        if sender.thread is None:
            sender.start()

    @property
    def sent(self) -> int:
        """Spans the endpoint accepted (2xx)."""
        return self._sender.sent

    @property
    def dropped(self) -> int:
        """Spans thrown away without trying: the queue was full, or the endpoint was backing
        off after a failure."""
        return self._rejected + self._sender.dropped

    @property
    def failed(self) -> int:
        """Spans in batches the endpoint refused or never answered."""
        return self._sender.failed

    @property
    def pending(self) -> int:
        """Spans queued or in flight."""
        return self._sender.queue.unfinished_tasks

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait up to ``timeout`` seconds for queued spans to be handled (sent or dropped);
        ``True`` when the queue drained. Call it from a thread that may block (not the loop)."""
        return self._sender.flush(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Flush, then stop the background thread; later spans are dropped."""
        self._closed = True
        self._sender.close(timeout)

    def __repr__(self) -> str:
        return f"http_span_sink({self.url!r})"


def http_span_sink(
    url: str,
    *,
    max_queue: int = 1024,
    batch_size: int = 64,
    timeout: float = 2.0,
    headers: dict[str, str] | None = None,
) -> HttpSpanSink:
    """A ``Callable[[Span], None]`` that feeds finished spans to ``url`` without ever
    slowing the run: ``MultiTracer(InMemoryTracer(), http_span_sink(url))``.

    :param max_queue: spans held while the endpoint is slow; beyond it new spans are dropped.
    :param batch_size: the most spans per POST.
    :param timeout: seconds to wait for the endpoint (on the background thread only).
    :param headers: extra request headers (e.g. an auth token).
    """
    return HttpSpanSink(
        url, max_queue=max_queue, batch_size=batch_size, timeout=timeout, headers=headers
    )
