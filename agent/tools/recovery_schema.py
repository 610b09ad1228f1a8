"""What the model is told about the recovery tools (:mod:`agent.tools.recovery`): their descriptions and
parameters, and the scopes ``session_search`` is offered (the chat it is asked in, or every chat of the person
asking), kept apart from the handlers so the tools' code and their wording each stay readable.
"""

from __future__ import annotations

from typing import Any

from agent.search import DEFAULT_HITS

#: Most hits one search hands back when the model asks for more than :data:`agent.search.DEFAULT_HITS`.
MAX_SEARCH_HITS = 20
SEARCH_DESCRIPTION = (
    "Search this chat's full history, including everything compacted out of the context and "
    "earlier conversations (before a /new), by keywords or an exact identifier (commit SHA, PR "
    "number, path, error text), and by meaning too where a meaning index is configured. A date "
    "phrase in the query ('last Saturday', 'in May', 'yesterday', '2023-05-08') finds what was "
    "written then or said about that day; a date alone lists that day's messages. Returns ranked "
    "snippets with message ids and their session, each with the turn before and the turn after it "
    "(the answer to a question it found); ids from an earlier conversation look like '<session>:<id>'."
)
SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "keywords, an identifier, a date phrase, or /regex/"},
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_SEARCH_HITS,
            "description": f"hits wanted (default {DEFAULT_HITS})",
        },
    },
    "required": ["query"],
}
FETCH_DESCRIPTION = (
    "Return the original text of messages of this chat by id (as cited by summaries, stubs and search hits). "
    "A message's photos come back as images, its documents and voice messages as their text."
)
#: Where ``session_search`` looks when it is offered a ``scope``: the chat it is asked in, or every chat the
#: person asking took part in (the first is the default, and the only one without a source of the second).
THIS_CHAT, MY_CHATS = "this chat", "my chats"
#: Between a chat's key and the id of one of its messages, in an id a ``my chats`` search hands out for another
#: chat: ``<chat>|<session>:<id>``. Session and message ids never hold it, so the last one splits such an id.
CHAT_SEPARATOR = "|"
SCOPED_SEARCH_DESCRIPTION = SEARCH_DESCRIPTION + (
    f" scope '{MY_CHATS}' also searches the other chats the person asking wrote in; such hits name their 'chat'."
)
SCOPED_SEARCH_PARAMETERS = {
    **SEARCH_PARAMETERS,
    "properties": {
        **SEARCH_PARAMETERS["properties"],
        "scope": {
            "type": "string",
            "enum": [THIS_CHAT, MY_CHATS],
            "description": f"default '{THIS_CHAT}'",
        },
    },
}
SCOPED_FETCH_DESCRIPTION = FETCH_DESCRIPTION + f" Ids from a '{MY_CHATS}' search too."
FETCH_PARAMETERS = {
    "type": "object",
    "properties": {"ids": {"type": "array", "items": {"type": "string"}, "maxItems": 20}},
    "required": ["ids"],
}
