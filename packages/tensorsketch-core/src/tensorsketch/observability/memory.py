"""Keep a run's spans in memory and read them back as a :class:`Trace` tree.

``InMemoryTracer`` is the tracer to assert on in tests and the one the eval harness runs each
trial under. A :class:`Trace` is the read side: the span tree, the headline numbers
(``summary()`` and one property per number) and a readable ``render()``. It is built from
live spans or from a JSON Lines file written by ``FileTracer`` (:meth:`Trace.load`), so the
same code reads a trace in memory and a trace on disk.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tensorsketch.observability.tracing import (
    ATTR_COST_USD,
    ATTR_INPUT_TOKENS,
    ATTR_OUTPUT_TOKENS,
    ATTR_REQUEST_MODEL,
    ATTR_RESPONSE_MODEL,
    ATTR_TOOL_NAME,
    RecordingTracer,
    Span,
)

__all__ = ["InMemoryTracer", "Trace"]

#: The keys of :meth:`Trace.summary`, in order.
SUMMARY_KEYS = (
    "duration_ms",
    "spans",
    "model_calls",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "errors",
)


def _int(value: Any) -> int:
    if isinstance(value, bool) or value is None:
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def model_of(span: Span) -> str | None:
    """The model a ``model`` span talked to (the answering model, else the requested one)."""
    attrs = span.attributes
    model = attrs.get(ATTR_RESPONSE_MODEL) or attrs.get(ATTR_REQUEST_MODEL)
    return str(model) if model else None


def cost_of(span: Span) -> float | None:
    """A span's estimated cost in USD, or ``None`` when it is unpriced."""
    value = span.attributes.get(ATTR_COST_USD)
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def is_unpriced(span: Span) -> bool:
    """A model call whose cost is unknown. A call that failed before reporting any usage (a
    429, a timeout) is not one: nothing was billed that the trace could price."""
    if span.kind != "model" or cost_of(span) is not None:
        return False
    attrs = span.attributes
    used = attrs.get(ATTR_INPUT_TOKENS) is not None or attrs.get(ATTR_OUTPUT_TOKENS) is not None
    return used or span.status != "error"


class Trace:
    """A read-only view of a set of spans as a tree, with the run's headline numbers.

    Tokens and cost are summed over ``model`` spans only (an agent or node span that repeats
    an aggregate is never double-counted). ``errors`` counts failures where they happened: an
    exception that propagates from a tool span up through its node and run spans counts once.
    """

    def __init__(self, spans: Iterable[Span]) -> None:
        self._spans: list[Span] = list(spans)
        self._children: dict[str, list[Span]] | None = None
        self._roots: list[Span] | None = None

    # -- building ---------------------------------------------------------------------------

    @classmethod
    def from_dicts(cls, rows: Iterable[dict[str, Any]]) -> Trace:
        """A trace from ``Span.to_dict()`` rows."""
        return cls(Span.from_dict(row) for row in rows)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Trace:
        """Read a JSON Lines trace file (one span per line, as ``FileTracer`` writes it)."""
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            msg = f"no trace file at {str(file)!r}; write one with `FileTracer({str(file)!r})`."
            raise FileNotFoundError(msg) from None
        rows: list[dict[str, Any]] = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                msg = (
                    f"{str(file)!r} line {number} is not JSON ({exc.msg}); a trace file has "
                    "one span object per line, as `FileTracer` writes it."
                )
                raise ValueError(msg) from None
            if not isinstance(row, dict) or "name" not in row:
                msg = (
                    f"{str(file)!r} line {number} is not a span (expected an object with "
                    f"'name', 'kind', 'duration_ms', ...), got {line[:80]!r}."
                )
                raise ValueError(msg)
            rows.append(row)
        return cls.from_dicts(rows)

    # -- the tree ---------------------------------------------------------------------------

    @property
    def spans(self) -> list[Span]:
        """Every span, in the order they finished."""
        return list(self._spans)

    def __len__(self) -> int:
        return len(self._spans)

    def __iter__(self) -> Iterator[Span]:
        return iter(self._spans)

    def _index(self) -> tuple[dict[str, list[Span]], list[Span]]:
        if self._children is None or self._roots is None:
            order = {id(span): i for i, span in enumerate(self._spans)}

            def key(span: Span) -> tuple[float, float, int]:
                return (span.started_at, span.start, order[id(span)])

            ids = {span.span_id for span in self._spans}
            children: dict[str, list[Span]] = {}
            roots: list[Span] = []
            for span in self._spans:
                if span.parent_id is not None and span.parent_id in ids:
                    children.setdefault(span.parent_id, []).append(span)
                else:
                    # no parent, or the parent lives elsewhere (a caller's remote span)
                    roots.append(span)
            for group in children.values():
                group.sort(key=key)
            roots.sort(key=key)
            self._children, self._roots = children, roots
        return self._children, self._roots

    @property
    def roots(self) -> list[Span]:
        """The top-level spans (normally one ``run`` span per invocation)."""
        return list(self._index()[1])

    def children(self, span: Span) -> list[Span]:
        """The direct children of ``span``, in start order."""
        return list(self._index()[0].get(span.span_id, ()))

    def parent(self, span: Span) -> Span | None:
        """The parent of ``span`` inside this trace (``None`` for a root)."""
        if span.parent_id is None:
            return None
        for candidate in self._spans:
            if candidate.span_id == span.parent_id:
                return candidate
        return None

    def walk(self) -> Iterator[tuple[int, Span]]:
        """Every span depth-first in start order, with its depth (roots are 0)."""
        children, roots = self._index()
        stack: list[tuple[int, Span]] = [(0, span) for span in reversed(roots)]
        while stack:
            depth, span = stack.pop()
            yield depth, span
            stack.extend((depth + 1, child) for child in reversed(children.get(span.span_id, ())))

    def find(self, name: str | None = None, *, kind: str | None = None) -> list[Span]:
        """Spans with this name and/or kind, in tree order."""
        return [
            span
            for _, span in self.walk()
            if (name is None or span.name == name) and (kind is None or span.kind == kind)
        ]

    @property
    def model_spans(self) -> list[Span]:
        """The model calls, in tree order."""
        return self.find(kind="model")

    @property
    def tool_spans(self) -> list[Span]:
        """The tool calls, in tree order (each carries the tool's name, args and result)."""
        return self.find(kind="tool")

    # -- the numbers ------------------------------------------------------------------------

    @property
    def duration_ms(self) -> float:
        """Wall time of the run: the sum of the root spans' durations."""
        return sum(span.duration_ms for span in self._index()[1])

    @property
    def span_count(self) -> int:
        """How many spans the trace holds (``summary()["spans"]``)."""
        return len(self._spans)

    @property
    def model_calls(self) -> int:
        return sum(1 for span in self._spans if span.kind == "model")

    @property
    def tool_calls(self) -> int:
        return sum(1 for span in self._spans if span.kind == "tool")

    @property
    def input_tokens(self) -> int:
        return sum(
            _int(span.attributes.get(ATTR_INPUT_TOKENS))
            for span in self._spans
            if span.kind == "model"
        )

    @property
    def output_tokens(self) -> int:
        return sum(
            _int(span.attributes.get(ATTR_OUTPUT_TOKENS))
            for span in self._spans
            if span.kind == "model"
        )

    @property
    def cost_usd(self) -> float:
        """Estimated cost of the priced model calls (see :attr:`unpriced_models`)."""
        return sum(cost_of(span) or 0.0 for span in self._spans if span.kind == "model")

    @property
    def unpriced_models(self) -> list[str]:
        """Models with at least one call that has no cost: their spend is missing from
        :attr:`cost_usd`."""
        found: dict[str, None] = {}
        for span in self._spans:
            if is_unpriced(span):
                found[model_of(span) or "(unknown model)"] = None
        return list(found)

    @property
    def error_spans(self) -> list[Span]:
        """Spans where a failure happened (not the parents it merely propagated through)."""
        children, _ = self._index()
        found: list[Span] = []
        for span in self._spans:
            if span.status != "error":
                continue
            propagated = any(
                child.status == "error" and child.error == span.error
                for child in children.get(span.span_id, ())
            )
            if not propagated:
                found.append(span)
        return found

    @property
    def errors(self) -> int:
        """How many failures the run had (see :attr:`error_spans`)."""
        return len(self.error_spans)

    def summary(self) -> dict[str, Any]:
        """The headline numbers as one dict (the documented keys, in order)."""
        return {
            "duration_ms": round(self.duration_ms, 1),
            "spans": self.span_count,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "errors": self.errors,
        }

    # -- rendering --------------------------------------------------------------------------

    def _annotation(self, span: Span, origins: set[int]) -> str:
        parts: list[str] = []
        if span.kind == "model":
            bits = [model_of(span) or "?"]
            if span.attributes.get(ATTR_OUTPUT_TOKENS) is not None:
                bits.append(f"{_int(span.attributes.get(ATTR_OUTPUT_TOKENS))} out-tok")
            cost = cost_of(span)
            if cost is not None:
                bits.append(f"${cost:.6f}")
            elif is_unpriced(span):
                bits.append("unpriced")
            parts.append(f"[{', '.join(bits)}]")
        elif span.kind == "tool":
            parts.append(f"[{span.attributes.get(ATTR_TOOL_NAME) or span.name}]")
        if span.status == "error":
            parts.append(f"[error: {span.error}]" if id(span) in origins else "[error]")
        elif span.status in ("cancelled", "suspended"):
            parts.append(f"[{span.status}]")
        return " ".join(parts)

    def render(self) -> str:
        """The span tree, indented, with durations and model/tool annotations."""
        origins = {id(span) for span in self.error_spans}
        rows: list[tuple[str, str]] = []
        for depth, span in self.walk():
            label = f"{'  ' * depth}{span.name} ({span.duration_ms:.1f}ms)"
            rows.append((label, self._annotation(span, origins)))
        if not rows:
            return "(empty trace)"
        width = max((len(label) for label, note in rows if note), default=0) + 2
        return "\n".join(f"{label.ljust(width)}{note}" if note else label for label, note in rows)

    def to_dicts(self) -> list[dict[str, Any]]:
        """Every span as a ``to_dict()`` row, in the order they finished."""
        return [span.to_dict() for span in self._spans]

    def __repr__(self) -> str:
        return f"Trace(spans={len(self._spans)}, duration_ms={self.duration_ms:.1f})"


class InMemoryTracer(RecordingTracer):
    """Keeps every finished span; ``tracer.trace`` reads them as a :class:`Trace`.

    One tracer can record several runs (they share its trace id); call :meth:`clear` to start
    over, or use a fresh tracer per run. ``capture_content=True`` keeps model calls' prompts
    and replies on their spans (see :class:`RecordingTracer`).
    """

    def __init__(self, *, traceparent: str | None = None, capture_content: bool = False) -> None:
        super().__init__(traceparent=traceparent, capture_content=capture_content)
        self._spans: list[Span] = []
        self._lock = threading.Lock()

    def _record(self, span: Span) -> None:
        with self._lock:
            self._spans.append(span)

    @property
    def spans(self) -> list[Span]:
        """The finished spans so far, in the order they closed."""
        with self._lock:
            return list(self._spans)

    @property
    def trace(self) -> Trace:
        """A snapshot of the spans recorded so far."""
        return Trace(self.spans)

    def clear(self) -> None:
        """Forget the recorded spans (the trace id is kept)."""
        with self._lock:
            self._spans.clear()
