"""One message's size bound: a message too long for the model reaches it as an excerpt, never whole.

Unbounded, one pasted megabyte goes to the provider at hundreds of thousands of tokens: the
request is refused, hygiene cannot shrink a session whose newest message alone is over the
window, and every later turn of the chat fails the same way. So a message over the bound is
stored whole in the session's archive (search and ``session_fetch`` find it; nothing is lost)
and the model gets its beginning and its end, told how to read the rest. The person is told
too, in the reply, what the bot saw.
"""

from __future__ import annotations

from agent.tokens import count_text

#: At most this share of the model's window goes to one message, whatever is configured.
WINDOW_SHARE = 4
#: Tokens the excerpt's own framing (the hint and the omission line) may take.
FRAMING_TOKENS = 160
#: Characters ``session_fetch`` returns of one message (``agent.tools.MAX_FETCH_CHARS``), named in the hint.
FETCH_CHARS = 20_000


def token_limit(configured: int, context_length: int) -> int:
    """The longest message, in tokens, the model gets whole: the configured bound, capped by the window."""
    return max(FRAMING_TOKENS * 2, min(configured, context_length // WINDOW_SHARE))


def tokens_over(text: str, limit: int) -> int | None:
    """The message's token count when it exceeds ``limit``; None when it fits (short texts are not counted)."""
    if len(text) * 3 <= limit:  # no tokenizer makes more than about three tokens of one character
        return None
    tokens = count_text(text)
    return tokens if tokens > limit else None


def excerpt(text: str, tokens: int, limit: int, original_id: str) -> str:
    """The head and the tail of ``text`` within ``limit`` tokens, with where the whole text is."""
    hint = (
        f"[This message is {tokens:,} tokens long, more than the {limit:,} one message may take, so only its "
        f"beginning and its end are shown here. It is stored whole as message {original_id}: "
        f"session_fetch(ids=[\"{original_id}\"]) returns its first {FETCH_CHARS:,} characters, and "
        "session_search finds passages anywhere in it.]"
    )
    room = max(limit - FRAMING_TOKENS, 1)
    chars = int(len(text) * room / tokens)
    while True:
        half = max(chars // 2, 1)
        head, tail = text[:half], text[-half:]
        omitted = len(text) - 2 * half
        body = f"{hint}\n\n{head}\n\n[… {omitted:,} characters left out here …]\n\n{tail}"
        if count_text(body) <= limit or half == 1:
            return body
        chars = int(chars * 0.8)


def notice(tokens: int, limit: int) -> str:
    """What the person is told above the reply to a message that reached the model as an excerpt."""
    return (
        f"ℹ️ Your message was very long (about {tokens:,} tokens; I read at most {limit:,} at once), so I saw "
        "only its beginning and its end. It is saved in full, and I can look up any part of it if you ask."
    )
