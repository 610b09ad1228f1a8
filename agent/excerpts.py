"""The head and the tail of a text too long to go to the model whole: a long message, a long tool result.

Unbounded, one pasted megabyte — or one tool that returns a database dump — goes to the provider at
hundreds of thousands of tokens: the request is refused, and a compaction cannot shrink a session
whose newest message alone is over the window. So such a text is stored whole in the session's
archive (search and ``session_fetch`` find it; nothing is lost) and the model gets its beginning
and its end, told where the whole is and how to read it.
"""

from __future__ import annotations

from agent.tokens import count_text
from agent.tools.recovery import MAX_FETCH_CHARS

#: Tokens the excerpt's own framing (the hint and the omission line) may take.
FRAMING_TOKENS = 160


def tokens_over(text: str, limit: int) -> int | None:
    """The text's token count when it exceeds ``limit``; None when it fits (short texts are not counted)."""
    if len(text) * 3 <= limit:  # no tokenizer makes more than about three tokens of one character
        return None
    tokens = count_text(text)
    return tokens if tokens > limit else None


def excerpt(text: str, tokens: int, limit: int, original_id: str, *, what: str = "message") -> str:
    """The head and the tail of ``text`` within ``limit`` tokens, with where the whole text is (``what`` names
    it: a message, a tool result)."""
    hint = (
        f"[This {what} is {tokens:,} tokens long, more than the {limit:,} one message may take, so only its "
        f"beginning and its end are shown here. It is stored whole as message {original_id}: "
        f'session_fetch(ids=["{original_id}"]) returns its first {MAX_FETCH_CHARS:,} characters, and '
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
