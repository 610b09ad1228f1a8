"""What the model reads about an item in the message's text: a bracketed header line, then any text.

The header says what the item is and whether its content follows, so the model (and search,
compaction and long-message excerpting, which read ``content``) knows a transcript from something
the person typed::

    [document invoice-0425.pdf, 3 pages]
    [document scan.pdf, 2 pages: no text layer (a scanned PDF?), so its text cannot be read]
    [voice message, 0:12, transcribed]
    [audio interview.mp3, 41:07: not transcribed: the transcription service answered 429 ...]
    [image photo.jpg was not taken in: over the 20 MB limit]
"""

from __future__ import annotations

from agent.messages import duration_text
from gateway.media.units import size_text

#: What each kind is called in a line.
KIND_WORDS = {"image": "image", "document": "document", "audio": "audio", "voice": "voice message"}


def item_title(kind: str, name: str) -> str:
    """``document invoice.pdf``; a voice message is never named (Telegram's have no name)."""
    word = KIND_WORDS.get(kind, kind)
    return word if kind == "voice" or not name else f"{word} {name}"


def document_header(name: str, *, pages: int = 0, size: int = 0, problem: str = "") -> str:
    facts = [f"{pages} page{'s' if pages != 1 else ''}" if pages else size_text(size) if size else ""]
    return _bracketed(item_title("document", name), facts, problem)


def sound_header(kind: str, name: str, *, seconds: float, problem: str = "") -> str:
    facts = [duration_text(seconds) if seconds else "", "" if problem else "transcribed"]
    return _bracketed(item_title(kind, name), facts, f"not transcribed: {problem}" if problem else "")


def refused_line(kind: str, name: str, reason: str) -> str:
    return f"[{item_title(kind, name)} was not taken in: {reason}]"


def _bracketed(title: str, facts: list[str], problem: str) -> str:
    head = ", ".join([title, *(fact for fact in facts if fact)])
    return f"[{head}: {problem}]" if problem else f"[{head}]"
