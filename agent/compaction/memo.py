"""A memo for functions of one message text: a session's messages are read once per process, not once per compaction.

Compaction may look at half a million tokens at once and again at the next compaction;
the messages it reads are mostly the same. Results are kept per ``(text, option)``,
least recently used dropped first, bounded by the characters of the texts held (a
count bound alone would let a few huge tool outputs pin hundreds of megabytes).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Result = TypeVar("Result")


class TextMemo(Generic[Result]):
    """``memo(text, option)`` is ``function(text, option)``, computed once while it stays in the memo."""

    def __init__(
        self,
        function: Callable[[str, Hashable], Result],
        max_chars: int = 24_000_000,
        max_item_chars: int = 1_000_000,
    ) -> None:
        self.function = function
        self.max_chars = max_chars
        self.max_item_chars = max_item_chars
        self._items: OrderedDict[tuple[str, Hashable], Result] = OrderedDict()
        self._chars = 0

    def __call__(self, text: str, option: Hashable = None) -> Result:
        if len(text) > self.max_item_chars:
            return self.function(text, option)
        key = (text, option)
        hit = self._items.get(key)
        if hit is not None:
            self._items.move_to_end(key)
            return hit
        result = self.function(text, option)
        self._items[key] = result
        self._chars += len(text)
        while self._chars > self.max_chars and self._items:
            (old_text, _), _ = self._items.popitem(last=False)
            self._chars -= len(old_text)
        return result

    def clear(self) -> None:
        self._items.clear()
        self._chars = 0
