"""Per-instance ``In`` / ``Out`` port schemas (their fields depend on the keys chosen), the
report fields an agent was asked to write, and the compile hints for its ports."""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import pydantic

from tensorsketch._assignable import type_text
from tensorsketch.schema import Schema

__all__ = ["ReportChoice", "port_hint", "ports", "report_fields"]

#: What ``Agent(report=...)`` takes: all report fields, none, or the names of some.
ReportChoice = bool | Iterable[str]


def ports(
    owner: str, inputs: Mapping[str, Any], outputs: Mapping[str, Any]
) -> tuple[type[Schema], type[Schema]]:
    module = "tensorsketch.agents"  # where these models were always made
    in_model = pydantic.create_model(f"{owner}In", __base__=Schema, __module__=module, **inputs)
    out_model = pydantic.create_model(f"{owner}Out", __base__=Schema, __module__=module, **outputs)
    return in_model, out_model


def report_fields(report: object, known: Collection[str]) -> frozenset[str]:
    """The report fields ``report=`` asks for: ``True`` all of ``known``, ``False`` none, or
    the names given (each checked against ``known``)."""
    if report is True:
        return frozenset(known)
    if report is False:
        return frozenset()
    listed = ", ".join(repr(k) for k in known)
    if isinstance(report, str):
        msg = (
            f"Agent(report=...) takes True, False or a list of field names, got the string "
            f"{report!r}; pass report=[{report!r}]."
        )
        raise TypeError(msg)
    if not isinstance(report, Iterable):
        msg = (
            f"Agent(report=...) takes True (every report field), False (none) or a list of "
            f"field names ({listed}), got {type(report).__name__} {report!r:.60}."
        )
        raise TypeError(msg)
    chosen = list(report)
    for name in chosen:
        if name not in known:
            close = difflib.get_close_matches(str(name), list(known), n=1)
            hint = f" — did you mean {close[0]!r}?" if close else ""
            msg = (
                f"Agent(report=...) names {name!r}, which is not a report field{hint} "
                f"The report fields are {listed}."
            )
            raise ValueError(msg)
    return frozenset(chosen)


def port_hint(
    port: str,
    state_fields: Collection[str],
    *,
    keys: Mapping[str, str],
    report: Mapping[str, Any],
    fixed: Mapping[str, Any],
) -> str | None:
    """The compile hint for an agent port the state has no field for: the option that names
    the port (``keys``: port -> option), that leaves it out (``report``: port -> type), or
    the field to add (``fixed``: port -> type, the ports no option changes)."""
    option = keys.get(port)
    if option is not None:
        close = difflib.get_close_matches(port, list(state_fields), n=1, cutoff=0.6)
        if close:
            return f"; point the agent at it with {option}={close[0]!r}."
        others = [f for f in state_fields if f not in keys and f not in report and f not in fixed]
        listed = f" (the state has {', '.join(repr(f) for f in others)})" if others else ""
        return (
            f"; add `{port}: str` to the state schema, or point the agent at another field "
            f"with {option}=...{listed}."
        )
    if port in report:
        kept = [f for f in report if f in state_fields]
        choice = (
            f"report={kept!r} writes only those the state has"
            if kept
            else ("report=False writes none")
        )
        return (
            f"; add `{port}: {_short(report[port])}` to the state schema, or leave it out "
            f"of the agent's report ({choice})."
        )
    if port in fixed:
        return (
            f"; add `{port}: {_short(fixed[port])}` to the state schema (an agent's "
            f"`{port}` port has no option to rename it)."
        )
    return None


def _short(tp: Any) -> str:
    """A type as a state would spell it: ``list[Message]``, not its module path."""
    if isinstance(tp, str):
        return tp
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", type_text(tp))
