"""Split a reply into messages a platform accepts: never truncated, nothing lost or reordered.

Platforms cap a message's length in their own units: Telegram counts UTF-16 code units (an
emoji outside the Basic Multilingual Plane costs 2), Discord counts characters. A reply longer
than the cap is cut into chunks, each at most ``limit`` units, at the best boundary available
in this order of preference:

1. a paragraph break (a blank line),
2. a line break,
3. the end of a sentence (``.`` ``!`` ``?`` ``…`` before a space, or ``。！？``),
4. a space between words,
5. a hard cut — never inside a surrogate pair, nor between a character and what extends it
   (combining marks, variation selectors, skin tones, ZWJ emoji sequences, flag pairs, CR LF).
   Only a single such cluster longer than the whole limit is cut inside.

A boundary of levels 1-4 is taken only when it keeps the chunk at least half full; otherwise
the next level is tried, so a chunk is never needlessly short.

Fenced code blocks (```` ``` ```` or ``~~~``, as in CommonMark) stay valid in every chunk: a
chunk that ends inside a block gets a closing fence line appended, and the next chunk starts
by reopening it with the same fence and info string (```` ```python ````). Those lines count
toward the limit. Cuts are never placed inside a fence line or where they would leave an
empty block. A fence whose reopen and close lines would take more than half the limit is
reopened without its info string; if even that does not fit, it is split like plain text.

What may be dropped, and nothing else (so joining the chunks, minus the added fence lines,
gives back the text with only whitespace missing, and only at cut points):

- at each cut between two chunks, the run of whitespace (spaces, tabs, line breaks) the cut
  falls in — except the indentation after the run's last line break, which stays at the start
  of the next chunk (code keeps its indentation); a hard cut drops nothing;
- whitespace that would make a chunk on its own (a run of blanks longer than the limit, or
  whitespace left after the last cut).

Non-breaking spaces are text, never cut at. A text that fits is returned unchanged as one
chunk; an empty or whitespace-only text gives ``[]`` (platforms refuse empty messages).
"""

from __future__ import annotations

import bisect
import itertools
import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

Units = Literal["utf16", "chars"]

#: Horizontal whitespace a line may be broken at (no-break spaces U+00A0, U+2007, U+202F excluded).
_BLANK = " \t\r\f\v\u1680\u2000-\u2006\u2008-\u200a\u205f\u3000"
_WHITESPACE_RUN = re.compile(f"[{_BLANK}\n]+")
_CONTENT = re.compile(r"\S")
_SENTENCE_END = frozenset(".!?…")
_CLOSERS = frozenset("\"'”’»)]")
_CJK_SENTENCE = re.compile("[。！？][」』）〉》】”’]*")
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})([^\n]*)", re.M)
#: Characters that never start a cut: they extend the character before them.
_EXTENDING_CATEGORIES = frozenset({"Mn", "Me", "Mc"})


def text_units(text: str, units: Units = "chars") -> int:
    """Length of ``text`` as the platform counts it (UTF-16 code units or characters)."""
    if units == "utf16":
        return len(text) + sum(1 for char in text if char > "\uffff")
    return len(text)


def split_message(text: str, limit: int, *, units: Units = "chars") -> list[str]:
    """``text`` as chunks of at most ``limit`` units each, in order (see the module docstring)."""
    if units not in ("utf16", "chars"):
        raise ValueError(f"units must be 'utf16' or 'chars', not {units!r}")
    if limit < (2 if units == "utf16" else 1):
        raise ValueError(f"limit {limit} cannot hold a character")
    return _Splitter(text, limit, units).chunks()


@dataclass(frozen=True)
class _Fence:
    """One fenced code block; its body is the text strictly between the two fence lines."""

    open_start: int  # start of the opening fence line
    open_end: int  # end of the opening line (its newline), the body starts after it
    close_start: int  # start of the closing line (len(text) when the block is never closed)
    close_end: int  # end of the closing fence marker
    reopen: str  # the line a continuation chunk starts with
    marker: str  # the closing fence line


class _Splitter:
    """One split: positions, unit counts, boundaries and fences of one text, precomputed once."""

    def __init__(self, text: str, limit: int, units: Units) -> None:
        self.text = text
        self.n = len(text)
        self.limit = limit
        self.units = units
        astral = units == "utf16" and any(char > "\uffff" for char in text)
        self._prefix: list[int] | None = (
            list(itertools.accumulate((2 if char > "\uffff" else 1 for char in text), initial=0)) if astral else None
        )
        self.fences = self._find_fences()
        self._fence_starts = [fence.open_start for fence in self.fences]
        self.levels = self._boundaries()

    # ------------------------------------------------------------------ measuring

    def measure(self, start: int, end: int) -> int:
        if self._prefix is None:
            return end - start
        return self._prefix[end] - self._prefix[start]

    def reach(self, start: int, budget: int) -> int:
        """The furthest end such that text[start:end] fits in ``budget`` units."""
        if self._prefix is None:
            return min(self.n, start + budget)
        return bisect.bisect_right(self._prefix, self._prefix[start] + budget, lo=start) - 1

    def has_content(self, start: int, end: int) -> bool:
        return start < end and _CONTENT.search(self.text, start, end) is not None

    def cuttable(self, index: int) -> bool:
        """True when a cut at ``index`` does not separate a character from what extends it."""
        if index <= 0 or index >= self.n:
            return True
        before, after = self.text[index - 1], self.text[index]
        if before == "\r" and after == "\n":
            return False
        if after == "\u200d" or before == "\u200d":
            return False
        code = ord(after)
        if 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF:  # variation selectors
            return False
        if 0x1F3FB <= code <= 0x1F3FF or 0xE0020 <= code <= 0xE007F:  # skin tones, emoji tag sequences
            return False
        if _is_regional_indicator(after) and _is_regional_indicator(before):
            run = 0
            while index - run - 1 >= 0 and _is_regional_indicator(self.text[index - run - 1]):
                run += 1
            return run % 2 == 0  # flags are pairs
        return unicodedata.category(after) not in _EXTENDING_CATEGORIES

    # ------------------------------------------------------------------ structure

    def _find_fences(self) -> list[_Fence]:
        fences: list[_Fence] = []
        opening: tuple[int, int, str, str] | None = None
        for match in _FENCE_LINE.finditer(self.text):
            marker, rest = match.group(1), match.group(2)
            if opening is None:
                if marker[0] == "`" and "`" in rest:
                    continue  # inline code such as ```x```, not a fence
                opening = (match.start(), match.end(), marker, rest.strip())
            elif marker[0] == opening[2][0] and len(marker) >= len(opening[2]) and not rest.strip():
                self._add_fence(fences, opening, match.start(), match.end(1))
                opening = None
        if opening is not None:
            self._add_fence(fences, opening, self.n, self.n)
        return fences

    def _add_fence(
        self, fences: list[_Fence], opening: tuple[int, int, str, str], close_start: int, close_end: int
    ) -> None:
        start, end, marker, info = opening
        room = self.limit // 2
        close_cost = 1 + len(marker)
        for reopen in (marker + info, marker):
            if text_units(reopen, self.units) + 1 + close_cost <= room:
                fences.append(_Fence(start, end, close_start, close_end, reopen, marker))
                return

    def _boundaries(self) -> list[tuple[list[int], list[int]]]:
        """Candidate cuts per level, best level first; each cut drops text[a:b]."""
        paragraph: list[tuple[int, int]] = []
        line: list[tuple[int, int]] = []
        sentence: list[tuple[int, int]] = []
        word: list[tuple[int, int]] = []
        text = self.text
        for match in _WHITESPACE_RUN.finditer(text):
            a, run = match.start(), match.group()
            breaks = run.count("\n")
            b = a + run.rindex("\n") + 1 if breaks else match.end()
            span = (a, b)
            word.append(span)
            if breaks:
                line.append(span)
                if breaks >= 2:
                    paragraph.append(span)
            elif _ends_sentence(text, a):
                sentence.append(span)
        for match in _CJK_SENTENCE.finditer(text):
            end = match.end()
            if end < self.n and not text[end].isspace():
                sentence.append((end, end))
        sentence.sort()
        return [([a for a, _ in spans], [b for _, b in spans]) for spans in (paragraph, line, sentence, word)]

    def _fence_at(self, index: int) -> _Fence | None:
        """The fence whose lines or body hold ``index`` (after its opening line starts)."""
        slot = bisect.bisect_left(self._fence_starts, index) - 1
        if slot >= 0 and index < self.fences[slot].close_end:
            return self.fences[slot]
        return None

    def _inside_body(self, index: int) -> _Fence | None:
        fence = self._fence_at(index)
        if fence and fence.open_end < index < fence.close_start:
            return fence
        return None

    # ------------------------------------------------------------------ cutting

    def allowed(self, start: int, a: int, b: int, budget: int, *, clusters: bool = True) -> tuple[bool, _Fence | None]:
        """Whether chunk text[start:a], next chunk from b, is a valid cut; and the fence it must close."""
        if not self.has_content(start, a):
            return False, None
        if clusters and not (self.cuttable(a) and self.cuttable(b)):
            return False, None
        closing = self._fence_at(a)
        if closing is not None:
            if a <= closing.open_end or a >= closing.close_start:
                return False, None  # inside a fence line, or the chunk would hold an empty block
            if not self.has_content(max(start, closing.open_end + 1), a):
                return False, None
            if self.measure(start, a) + 1 + len(closing.marker) > budget:
                return False, None
        reopened = self._fence_at(b)
        if reopened is not None:
            if b <= reopened.open_end or b >= reopened.close_start:
                return False, None
            if not self.has_content(b, reopened.close_start):
                return False, None  # the next chunk would reopen an empty block
        return True, closing

    def cut(self, start: int, end: int, budget: int) -> tuple[int, int, _Fence | None]:
        """Where the chunk starting at ``start`` (fitting up to ``end``) ends: (a, b, fence to close)."""
        half = budget // 2
        for starts, ends in self.levels:
            slot = bisect.bisect_right(starts, end) - 1
            while slot >= 0:
                a = starts[slot]
                if a <= start or self.measure(start, a) < half:
                    break
                ok, closing = self.allowed(start, a, ends[slot], budget)
                if ok:
                    return a, ends[slot], closing
                slot -= 1
        if not self.has_content(start, end):
            return end, end, None  # only whitespace fits here: the caller drops it
        for clusters in (True, False):
            for a in range(end, start, -1):
                ok, closing = self.allowed(start, a, a, budget, clusters=clusters)
                if ok:
                    return a, a, closing
        return end, end, None  # one cluster wider than the limit inside a fence line: cut it anyway

    def chunks(self) -> list[str]:
        out: list[str] = []
        text, start = self.text, 0
        while start < self.n and self.has_content(start, self.n):
            reopened = self._inside_body(start)
            prefix = reopened.reopen + "\n" if reopened else ""
            budget = self.limit - text_units(prefix, self.units)
            end = self.reach(start, budget)
            if end >= self.n:
                out.append(prefix + text[start:])
                break
            a, b, closing = self.cut(start, end, budget)
            if self.has_content(start, a):
                out.append(prefix + text[start:a] + ("\n" + closing.marker if closing else ""))
            start = b
        return out


def _is_regional_indicator(char: str) -> bool:
    return "\U0001f1e6" <= char <= "\U0001f1ff"


def _ends_sentence(text: str, index: int) -> bool:
    """True when the text before ``index`` ends a sentence (terminator, then maybe quotes/brackets)."""
    position = index - 1
    while position >= 0 and index - position <= 3 and text[position] in _CLOSERS:
        position -= 1
    return position >= 0 and text[position] in _SENTENCE_END
