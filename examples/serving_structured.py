"""Structured output through the OpenAI-compatible API: ``chat.completions.parse`` against an
agent, offline (fake model, in-process HTTP).

The client asks for a ``Pet`` (``response_format`` with its JSON schema). For that request the
agent's ``output_schema`` is the client's schema: the model's first answer is prose, so the
agent sends the schema's problems back, the model answers again in JSON, and the client gets
the validated object. Run: python examples/serving_structured.py
"""

from __future__ import annotations

import asyncio

import httpx
from openai import AsyncOpenAI
from pydantic import BaseModel

from tensorsketch import FakeProvider, create_agent
from tensorsketch.serve import openai_app


class Pet(BaseModel):
    name: str
    age: int


model = FakeProvider(["Your pet is Rex, three years old.", '{"name": "Rex", "age": 3}'])
app = openai_app(create_agent(model), model="pets")


async def main() -> None:
    client = AsyncOpenAI(
        base_url="http://pets.local/v1",
        api_key="unused",
        http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=app)),
    )
    completion = await client.chat.completions.parse(
        model="pets",
        messages=[{"role": "user", "content": "Tell me about my pet."}],
        response_format=Pet,
    )
    pet = completion.choices[0].message.parsed
    print(f"parsed: {pet!r}")
    print(f"the model was asked {len(model.calls)} times (one repair)")
    repair = model.calls[-1].messages[-1].text
    print(f"what the agent sent back: {repair[:80]}...")
    assert pet == Pet(name="Rex", age=3)


if __name__ == "__main__":
    asyncio.run(main())
