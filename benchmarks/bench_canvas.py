"""Benchmark the code ⇄ canvas engine on a generated 300-node graph file.

Run with ``python benchmarks/bench_canvas.py [--nodes 300] [--repeat 3]``. For each authoring
style it times extraction, a no-op write-back and three real write-backs (add an edge, create
a node, rename a node), and prints the best of ``--repeat`` runs. The goal is under one second
for each; nothing here asserts it (timings depend on the machine).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from tensorsketch.canvas import GraphIR, edits, extract, reconstruct

STYLES = ("fluent", "statement", "operator")


def node_classes(count: int) -> str:
    parts = [
        "from tensorsketch import END, START, Context, Graph, Hole, Node, Router, Schema\n\n",
        "class State(Schema):\n    text: str = ''\n\n",
    ]
    for i in range(count):
        body = 'raise Hole("write me")' if i % 3 == 0 else "return self.Out()"
        parts.append(
            f"\nclass N{i}(Node):\n"
            f"    class In(Schema):\n        text: str\n\n"
            f"    class Out(Schema):\n        text: str\n\n"
            f"    async def run(self, ctx: Context, inp: In) -> Out:\n"
            f"        # node {i} does its own thing here\n"
            f"        {body}\n\n"
        )
    parts.append("\ndef route(state: State) -> str:\n    return 'a'\n\n\n")
    return "".join(parts)


def wiring(count: int, style: str) -> str:
    """A chain N0 -> ... -> N(count-1), with a router every 25 nodes."""
    routed = set(range(0, count - 2, 25))
    if style == "fluent":
        lines = ["app = (", "    Graph(State)"]
        lines += [f"    .add(N{i})" for i in range(count)]
        lines.append('    .edge(START, "N0")')
        for i in range(count - 1):
            if i in routed:
                lines.append(
                    f'    .conditional("N{i}", route, {{"a": "N{i + 1}", "b": "N{i + 2}"}})'
                )
            else:
                lines.append(f'    .edge("N{i}", "N{i + 1}")')
        lines += [f'    .edge("N{count - 1}", END)', ").compile()"]
    elif style == "statement":
        lines = ["g = Graph(State)"]
        lines += [f"g.add(N{i})" for i in range(count)]
        lines.append('g.edge(START, "N0")')
        for i in range(count - 1):
            if i in routed:
                lines.append(f'g.conditional("N{i}", route, {{"a": "N{i + 1}", "b": "N{i + 2}"}})')
            else:
                lines.append(f'g.edge("N{i}", "N{i + 1}")')
        lines += [f'g.edge("N{count - 1}", END)', "", "app = g.compile()"]
    else:
        lines = ["g = Graph(State)"]
        for start in range(0, count, 10):
            names = [f"N{i}" for i in range(start, min(start + 10, count))]
            lines.append(f"{', '.join(n.lower() for n in names)} = g.nodes({', '.join(names)})")
        lines.append("START >> n0")
        for i in range(count - 1):
            if i in routed:
                lines.append(f"n{i} >> Router(route, a=n{i + 1}, b=n{i + 2})")
            else:
                lines.append(f"n{i} >> n{i + 1}")
        lines += [f"n{count - 1} >> END", "", "app = g.compile()"]
    return "\n".join(lines) + "\n"


def best(repeat: int, fn: Callable[[], object], clock: Callable[[], float]) -> float:
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        times.append(clock() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    classes = node_classes(args.nodes)
    cases: list[tuple[str, str, list[Callable[[], object]]]] = []
    for style in STYLES:
        source = classes + wiring(args.nodes, style)
        ir = extract(source)
        assert len(ir.nodes) == args.nodes
        targets: list[GraphIR] = [
            ir,
            edits.add_edge(ir, "N5", "N200"),
            edits.add_edge(edits.add_node(ir, "Escalate", [("text", "str")]), "N7", "Escalate"),
            edits.rename_node(ir, "N10", "Reviewer"),
        ]
        calls: list[Callable[[], object]] = [lambda source=source: extract(source)]
        calls += [lambda source=source, t=t: reconstruct(source, t) for t in targets]
        cases.append((style, source, calls))

    columns = ("extract", "no-op", "+edge", "+node", "rename")
    for title, clock in (("wall clock", time.perf_counter), ("CPU time", time.process_time)):
        print(f"\n{args.nodes}-node graph, {title}, best of {args.repeat} (seconds)")
        header = f"{'style':<10} {'lines':>6} " + " ".join(f"{c:>8}" for c in columns)
        print(header)
        print("-" * len(header))
        for style, source, calls in cases:
            cells = " ".join(f"{best(args.repeat, call, clock):>8.3f}" for call in calls)
            print(f"{style:<10} {source.count(chr(10)):>6} {cells}")
    print("\nWrite-back times include re-extracting the result to check the round trip.")


if __name__ == "__main__":
    main()
