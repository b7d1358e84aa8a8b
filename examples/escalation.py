"""A support team (a subgraph) that escalates a ticket by handing the run back to the desk
graph running it: ``Command(graph=Command.PARENT, goto=..., update=...)``.

The team's triage node stops the team there, writes a field only the desk has (``owner``)
and a log line through the desk's reducer, and sends the desk to ``Manager``, which waits
for a person. The hand-back is journaled in the desk's thread, so resuming the desk never
enters the team again: the team's lookup ran once.

Run: python examples/escalation.py
"""

import asyncio
import operator
from typing import Annotated

from tensorsketch import (
    END,
    START,
    Command,
    Context,
    Graph,
    InMemoryBackend,
    Node,
    Reducer,
    Schema,
    run_info,
)
from tensorsketch.interrupts import interrupt

LOOKUPS: list[str] = []


class Team(Schema):
    ticket: str
    log: Annotated[list[str], Reducer(operator.add)] = []


class Triage(Node):
    class In(Schema):
        ticket: str

    class Out(Schema):
        log: list[str]

    async def run(self, ctx: Context, inp: In) -> Out | Command:
        def lookup() -> str:
            LOOKUPS.append(inp.ticket)  # the side effect: journaled, never repeated
            return f"customer tier for {inp.ticket!r}: gold"

        seen = await ctx.step("lookup", lookup)
        if "refund" in inp.ticket:
            return Command(
                graph=Command.PARENT,
                goto="Manager",
                update={"log": [seen, "escalated"], "owner": "manager"},
            )
        return self.Out(log=[seen, "answered by the team"])


class Reply(Node):
    class Out(Schema):
        log: list[str]

    async def run(self, ctx: Context, inp: Schema) -> Out:
        return self.Out(log=["team replied"])


team = Graph(Team, name="Team").add(Triage).add(Reply)
team.edge(START, "Triage").edge("Triage", "Reply").edge("Reply", END)


class Desk(Schema):
    ticket: str
    log: Annotated[list[str], Reducer(operator.add)] = []
    owner: str = "team"  # only the desk has it


class Manager(Node):
    class In(Schema):
        owner: str

    class Out(Schema):
        log: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        verdict = await interrupt(ctx, "approve the refund?")
        return self.Out(log=[f"{inp.owner} said {verdict}"])


desk = Graph(Desk).add(team.compile(), destinations=("Manager",)).add(Manager)
desk.edge(START, "Team").edge("Manager", END)
app = desk.compile()


async def main() -> None:
    backend = InMemoryBackend()
    out = await app.invoke({"ticket": "where is my parcel"}, thread_id="t1", backend=backend)
    print(out.owner, out.log)  # team [..., 'answered by the team', 'team replied']

    out = await app.invoke({"ticket": "refund please"}, thread_id="t2", backend=backend)
    (question,) = run_info(out).interrupts
    print(out.owner, out.log, "| waiting:", question.value)
    out = await app.invoke(thread_id="t2", backend=backend, resume={question.id: "yes"})
    print(out.owner, out.log)  # manager [..., 'escalated', 'manager said yes']
    assert LOOKUPS == ["where is my parcel", "refund please"]  # each lookup ran once
    assert "team replied" not in out.log  # the team stopped at its hand-back


if __name__ == "__main__":
    asyncio.run(main())
