"""What a run record stores as its ``output``: the final state's JSON dict, exactly
``model_dump(mode="json")`` (``tensorsketch.runs.records.plain``), and a finished record as it
reads back from the store after its outcome rode the run's last commit."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, computed_field, field_serializer

from tensorsketch.agents import AgentState
from tensorsketch.runs import AsyncRunner
from tensorsketch.runs.records import plain
from tensorsketch.runtime.backends.runs import run_store
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.runs import settle_agent


class Colour(enum.Enum):
    RED = "red"


class Inner(BaseModel):
    at: dt.datetime
    amount: decimal.Decimal


class Rich(BaseModel):
    """A state with values that JSON mode turns into other types."""

    colour: Colour = Colour.RED
    blob: bytes = b"raw\x01"
    id: uuid.UUID = uuid.UUID(int=7)
    pair: tuple[int, str] = (1, "a")
    tags: frozenset[str] = frozenset({"x"})
    inner: Inner = Inner(at=dt.datetime(2026, 1, 2, 3, 4, 5), amount=decimal.Decimal("1.50"))
    aliased: int = Field(default=3, alias="Aliased")
    secret: str = "s"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def doubled(self) -> int:
        return self.aliased * 2

    @field_serializer("secret")
    def _hide(self, value: str) -> str:
        return "*" * len(value)


class Overriding(BaseModel):
    """A state whose class dumps itself its own way."""

    value: int = 1

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        return {"custom": kwargs.get("mode"), "value": self.value}


def test_plain_is_the_models_json_dump() -> None:
    state = Rich()
    assert plain(state) == state.model_dump(mode="json")
    assert plain(state)["secret"] == "*" and plain(state)["doubled"] == 6
    assert plain(AgentState(query="q")) == AgentState(query="q").model_dump(mode="json")


def test_plain_keeps_a_models_own_model_dump_and_other_values_as_they_are() -> None:
    assert plain(Overriding()) == {"custom": "json", "value": 1}
    value = {"a": [1, (2, 3)]}
    assert plain(value) is value
    assert plain(None) is None


async def test_a_finished_runs_stored_record_holds_its_final_state_as_json(
    tmp_path: Path,
) -> None:
    # The outcome rides the run's last commit; read back by another backend (decoded from
    # the stored bytes), the record is the one await_run returned, with the final state's
    # JSON dump as its output and every finishing field set.
    path = str(tmp_path / "runs.db")
    backend = SqliteBackend(path)
    agent = settle_agent()
    async with AsyncRunner(agent, backend=backend) as runner:
        submitted = await runner.submit({"query": "settle"}, thread_id="t")
        done = await runner.await_run(submitted.run_id, timeout=30)
        state = await agent.aget_state("t", backend)
    await backend.aclose()
    assert state is not None
    other = SqliteBackend(path)
    try:
        stored = await run_store(other).get(submitted.run_id)
    finally:
        await other.aclose()
    assert stored == done
    assert stored.status == "succeeded" and stored.error is None
    assert stored.output == state.model_dump(mode="json")
    assert stored.output["output"] == "settled"
    assert [m["role"] for m in stored.output["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert stored.finished_at is not None and stored.finished_at == stored.updated_at
    assert stored.owner is None and stored.lease_expires_at is None
    assert stored.segment_started_at is None and stored.active_seconds > 0
    assert stored.interrupts == () and stored.decisions == {} and stored.events == ()
    assert stored.version == submitted.version + 2  # running (rode the opening), finished
