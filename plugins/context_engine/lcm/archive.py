"""Where the engine's tools read messages: the session archive, and its own in-memory archive.

In the gateway the session store archives every message a compaction takes out of the
context, and the engine reads it through an attached :class:`agent.tools.MessageSource`.
Without a gateway (``foldgate compact``, the eval harness, a library user) there is no
store, so the engine keeps the originals it compacted itself. It keeps them in the
gateway too: a compaction in the middle of a turn is committed only when the turn ends,
and the model may ask for what was just folded away before that.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.compaction.lean import STUBBED_KEY
from agent.messages import SYNTHETIC_KEY, Message, is_summary
from agent.tools import MessageSource

#: Prefix of the ids given to compacted messages that arrived without one.
LOCAL_ID_PREFIX = "lcm-"


def is_derived(message: Message) -> bool:
    """A message foldgate wrote from others — a summary, a stub, a stand-in result, an edited copy.

    Its originals are archived under their own ids, so the archive never needs it and a
    search that returned it would only repeat (or paraphrase) an original.
    """
    return is_summary(message) or bool(message.get(SYNTHETIC_KEY)) or "_orig_id" in message or STUBBED_KEY in message


class MemoryArchive:
    """Originals this engine took out of the context, by id, in the order they left.

    Unbounded on purpose: offline it is the only copy, and every original must stay retrievable. Its
    lifetime is the engine's — one turn in the gateway, one run offline.
    """

    def __init__(self) -> None:
        self._by_id: dict[str, Message] = {}
        self._local = 0

    def add(self, message: Message) -> str:
        """Keep ``message``; returns its id (a local one, on a copy, when it has none)."""
        message_id = message.get("_id")
        if message_id is None:
            self._local += 1
            message_id = f"{LOCAL_ID_PREFIX}{self._local}"
            message = {**message, "_id": message_id}
        key = str(message_id)
        self._by_id.setdefault(key, message)
        return key

    def messages(self) -> list[Message]:
        return list(self._by_id.values())

    def get(self, message_id: str) -> Message | None:
        return self._by_id.get(str(message_id))

    def __len__(self) -> int:
        return len(self._by_id)

    def clear(self) -> None:
        self._by_id.clear()
        self._local = 0


class ArchiveView:
    """One chat's messages as the engine's tools see them: attached history, own archive, live context.

    ``live`` is the context as the engine last returned it; it matters offline, where no
    history says what is still in the context.
    """

    def __init__(self, memory: MemoryArchive) -> None:
        self.memory = memory
        self.history: MessageSource | None = None
        self.live: list[Message] = []

    @property
    def backing(self) -> str:
        return "session archive" if self.history is not None else "in-memory archive (no session store attached)"

    async def all_messages(self) -> list[Message]:
        """Archived first, then the live context; each id once."""
        found: list[Message] = list(await self.history.all_messages()) if self.history is not None else []
        seen = {str(m["_id"]) for m in found if m.get("_id") is not None}
        for message in [*self.memory.messages(), *self.live]:
            message_id = message.get("_id")
            if message_id is None or str(message_id) in seen:
                continue
            seen.add(str(message_id))
            found.append(message)
        return found

    async def by_ids(self, ids: Sequence[str]) -> list[Message]:
        """The messages with these ids, in the order asked; unknown ids left out."""
        wanted = [str(value) for value in ids]
        found: dict[str, Message] = {}
        if self.history is not None:
            for message in await self.history.messages_by_id(wanted):
                found[str(message.get("_id"))] = message.copy()
        live = {str(m["_id"]): m for m in self.live if m.get("_id") is not None}
        for value in wanted:
            if value not in found:
                kept = self.memory.get(value) or live.get(value)
                if kept is not None:
                    found[value] = kept
        return [found[value] for value in dict.fromkeys(wanted) if value in found]
