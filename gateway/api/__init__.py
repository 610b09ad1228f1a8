"""The OpenAI-compatible HTTP API: one more platform adapter, whose chats are API sessions."""
