"""The provider seam's former import path: everything here is :mod:`tensorsketch.provider`.

Kept so code written before the move (``from tensorsketch.chat import Completion``) still
runs; new code imports from :mod:`tensorsketch.provider` or from ``tensorsketch`` itself.
"""

from tensorsketch.provider import (
    AuthenticationError,
    BadRequestError,
    Capabilities,
    ChatProvider,
    Completion,
    ProviderConnectionError,
    ProviderError,
    ProviderServerError,
    ProviderTimeoutError,
    RateLimitError,
    ReasoningDelta,
    StreamDelta,
    StructuredOutputError,
    TextDelta,
    ToolCallDelta,
    Usage,
    is_retryable,
    parse_structured,
)

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "Capabilities",
    "ChatProvider",
    "Completion",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderServerError",
    "ProviderTimeoutError",
    "RateLimitError",
    "ReasoningDelta",
    "StreamDelta",
    "StructuredOutputError",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
    "is_retryable",
    "parse_structured",
]
