"""What ``MsgpackSerializer.dumps`` costs on the values a durable run writes (issue 49): a
checkpoint of an agent's state (pydantic messages with tool calls, usage, a tuple), a run
record (some forty fields, five of them float timestamps) and a ``values`` event, each
encoded by ormsgpack's native walk (``dumps``) and by the Python walk it replaced, which
stays as its fallback (``_dumps_walked``) — same bytes, checked. Also each encoded inside
one ``shared_encoding`` block with the checkpoint, as a commit does. Usage::

    python benchmarks/bench_serializer.py          # best of 7 rounds
    TS_BENCH_QUICK=1 python benchmarks/bench_serializer.py
"""

import os
import sys
import time
from collections.abc import Callable
from typing import Any

QUICK = os.environ.get("TS_BENCH_QUICK") == "1"


def _values(turns: int) -> dict[str, Any]:
    from tensorsketch.messages import ToolCall, assistant, tool_result, user

    messages: list[Any] = []
    for i in range(turns):
        call = ToolCall(id=f"c{i}", name="lookup", args={"order": i, "fields": ["a", "b"]})
        messages += [
            user(f"question {i}: where is order {i}?"),
            assistant(tool_calls=[call]),
            tool_result(call, {"order": i, "status": "shipped", "eta_days": 2.5}),
            assistant(f"Order {i} has shipped; it arrives in about two days."),
        ]
    state = {
        "query": "where are my orders?",
        "messages": messages,
        "output": messages[-1].text if hasattr(messages[-1], "text") else "",
        "iterations": turns,
        "pending": [],
        "usage": {"input_tokens": 1200, "output_tokens": 340, "cache_read_tokens": 0},
        "cost_usd": None,
        "path": ("agent", "tools", "agent"),
    }
    now = 1796609073.9226878
    record = {
        "run_id": "run_f0f112e41d154103b54f9f90e86c763e",
        "thread_id": "t1",
        "graph": "agent",
        "status": "succeeded",
        "input": {"query": "where are my orders?"},
        "output": {k: v for k, v in state.items() if k != "messages"},
        "interrupts": [],
        "decisions": {},
        "events": [],
        "created_at": now,
        "updated_at": now + 0.0126,
        "started_at": now + 0.0024,
        "finished_at": now + 0.0125,
        "lease_expires_at": now + 30.0,
        "error": None,
        "labels": {"tenant": "acme", "tier": "gold"},
        **{f"field_{i}": None for i in range(22)},
    }
    event = {"kind": "values", "ts": now, "step": 3, "values": state}
    return {"checkpoint": state, "run record": record, "values event": event}


def _paired(
    walk: Callable[[], Any], native: Callable[[], Any], number: int, rounds: int
) -> tuple[float, float]:
    """Best time per call of each, the two taking turns round by round (a loaded machine
    weighs on both alike)."""
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, fn in enumerate((walk, native)):
            started = time.perf_counter()
            for _ in range(number):
                fn()
            best[i] = min(best[i], (time.perf_counter() - started) / number)
    return best[0], best[1]


def _python_calls(fn: Callable[[], Any]) -> int:
    """Python function calls while ``fn`` runs: deterministic, unlike the times."""
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def main() -> None:
    from tensorsketch.serializers import MsgpackSerializer, shared_encoding

    number, rounds = (100, 3) if QUICK else (1000, 7)
    codec = MsgpackSerializer()
    print(f"\n## MsgpackSerializer.dumps per call (best of {rounds} alternating rounds)\n")
    print("| value | bytes | Python calls, walk → native | µs, walk | µs, native | walk / native |")
    print("|---|---:|---:|---:|---:|---:|")
    rows: list[tuple[str, int, Callable[[], Any], Callable[[], Any]]] = []
    for turns in (1, 10):
        for name, value in _values(turns).items():
            assert codec.dumps(value) == codec._dumps_walked(value), name
            label = f"{name}, {turns} turn{'s' if turns > 1 else ''}"
            rows.append(
                (
                    label,
                    len(codec.dumps(value)),
                    lambda v=value: codec._dumps_walked(v),
                    lambda v=value: codec.dumps(v),
                )
            )
    values = list(_values(10).values())

    def commit(dumps: Callable[[Any], bytes]) -> Callable[[], Any]:
        def run() -> None:
            with shared_encoding(codec):
                for value in values:
                    dumps(value)

        return run

    rows.append(
        (
            "all three in one shared_encoding, 10 turns",
            0,
            commit(codec._dumps_walked),
            commit(codec.dumps),
        )
    )
    for label, size, walk, native in rows:
        calls = f"{_python_calls(walk):,} → {_python_calls(native):,}"
        t_walk, t_native = _paired(walk, native, number if size else number // 4, rounds)
        print(
            f"| {label} | {f'{size:,}' if size else ''} | {calls} | {t_walk * 1e6:.1f} "
            f"| {t_native * 1e6:.1f} | {t_walk / t_native:.2f}x |"
        )


if __name__ == "__main__":
    main()
