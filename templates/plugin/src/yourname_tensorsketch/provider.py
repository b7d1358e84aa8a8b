"""The `yourname` chat provider. Replace the echo in `complete` with a call to your API."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorsketch import ChatProvider, Completion, Message, Schema, Tool
from tensorsketch.messages import assistant


class YournameProvider(ChatProvider):
    """Answers with the last user message (a stand-in for a real model API)."""

    provider_name = "yourname"

    def __init__(self, model: str = "yourname-1", **options: Any) -> None:
        self.model = model
        self.options = options

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Tool] | None = None,
        output_schema: type[Schema] | None = None,
        max_tokens: int = 1024,
        **options: Any,
    ) -> Completion:
        last = next((m.text for m in reversed(messages) if m.role == "user"), "")
        return Completion(message=assistant(last), model=self.model, stop_reason="end_turn")
