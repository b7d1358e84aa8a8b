"""Exactly-once side effects across a real crash.

A worker process charges a card through a journaled step and is killed (SIGKILL) right after
the payment API answered — before the run could finish. This process then resumes the same
thread from the SQLite file: the charge is replayed from the journal, the receipt is sent, and
the payment API has been called exactly once. Offline; everything lives in a temp directory.

Run: python examples/durable_resume.py
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tensorsketch import END, START, Context, Graph, Node, Schema, ThreadBusyError
from tensorsketch.runtime.backends import SqliteBackend

WORKDIR = Path(os.environ.get("TS_EXAMPLE_TMP") or tempfile.mkdtemp(prefix="ts-durable-"))
DB = WORKDIR / "runs.db"
# A runner holds a lease on its thread; a crashed runner's lease lapses after this long
# (30 s by default, shortened so the demo does not wait).
LEASE_TTL = 1.0


class PaymentApi:
    """Stands in for a real payment provider: every call is appended to a log file."""

    log = WORKDIR / "payment-api.log"

    async def charge(self, user: str) -> int:
        with self.log.open("a") as f:
            f.write(f"charged {user} 4200\n")
        return 4200

    def calls(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0


payment_api = PaymentApi()


class Order(Schema):
    user: str
    charged: int = 0
    receipt: str = ""


class Charge(Node):
    class In(Schema):
        user: str

    class Out(Schema):
        charged: int

    async def run(self, ctx: Context, inp: In) -> Out:
        # Runs once, ever — even across crashes and resumes of this thread.
        amount: int = await ctx.step("charge_card", lambda: payment_api.charge(inp.user))
        if os.environ.get("CRASH_AFTER_CHARGE"):
            os.kill(os.getpid(), signal.SIGKILL)  # the process dies here, mid-run
        return self.Out(charged=amount)


class Receipt(Node):
    class In(Schema):
        user: str
        charged: int

    class Out(Schema):
        receipt: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(receipt=f"{inp.user} paid {inp.charged / 100:.2f} EUR")


app = (
    Graph(Order)
    .add(Charge)
    .add(Receipt)
    .edge(START, "Charge")
    .edge("Charge", "Receipt")
    .edge("Receipt", END)
    .compile()
)


async def work() -> None:
    """The worker: start the run (it will be killed inside Charge)."""
    backend = SqliteBackend(DB, lease_ttl=LEASE_TTL)
    await app.invoke({"user": "user-42"}, thread_id="user-42", backend=backend)


async def resume() -> Order:
    backend = SqliteBackend(DB, lease_ttl=LEASE_TTL)
    before = await app.aget_state("user-42", backend)
    assert before is not None
    print(f"checkpointed state before resuming: charged={before.charged}")
    while True:
        try:
            out = await app.invoke(thread_id="user-42", backend=backend)  # no input: continue
            break
        except ThreadBusyError:
            print("the dead worker still holds the thread's lease; waiting for it to lapse")
            await asyncio.sleep(LEASE_TTL / 2)
    await backend.aclose()
    return out


def main() -> None:
    if sys.argv[1:] == ["--worker"]:
        asyncio.run(work())
        return
    worker = subprocess.run(
        [sys.executable, __file__, "--worker"],
        env={**os.environ, "CRASH_AFTER_CHARGE": "1", "TS_EXAMPLE_TMP": str(WORKDIR)},
        check=False,
    )
    print(f"worker exited with {worker.returncode} (killed after the card was charged)")
    out = asyncio.run(resume())
    print(f"resumed: {out.receipt}")
    print(f"payment API calls: {payment_api.calls()}")
    if payment_api.calls() != 1:
        raise SystemExit("the card was charged more than once")


if __name__ == "__main__":
    main()
