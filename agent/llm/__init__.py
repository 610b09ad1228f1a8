"""Provider clients: one reusable httpx client per endpoint, typed errors, normalised usage."""

from agent.llm.client import ChatClient
from agent.llm.errors import (
    BadResponse,
    ContextTooLong,
    InvalidRequest,
    ProviderError,
    ProviderRejected,
    ProviderTimeout,
    ProviderUnavailable,
    RateLimited,
)
from agent.llm.types import Completion
from agent.usage import Usage

__all__ = [
    "BadResponse",
    "ChatClient",
    "Completion",
    "ContextTooLong",
    "InvalidRequest",
    "ProviderError",
    "ProviderRejected",
    "ProviderTimeout",
    "ProviderUnavailable",
    "RateLimited",
    "Usage",
]
