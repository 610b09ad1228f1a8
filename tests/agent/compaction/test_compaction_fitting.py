"""Fitting a summary together: memoized line counts, "is it shown already?", and the per-text memo."""

from agent.compaction.fitting import Shown, count_line
from agent.compaction.memo import TextMemo
from agent.tokens import count_text


def test_count_line_is_the_exact_count():
    for text in ("3b7dc54 fix(catalog): cursor pagination", "x" * 1_000, "", "設定ファイル"):
        assert count_line(text) == count_text(text)


def test_shown_finds_whole_words_column_parts_and_phrases():
    shown = Shown(
        "- src/shop/rounding.py:113:def handle(batch):", "Committed `3b7dc54` (see PR #12).", "ValueError: bad row 7"
    )
    assert "src/shop/rounding.py" in shown  # a search hit's path
    assert "3b7dc54" in shown and "PR #12" in shown and "#12" in shown
    assert "ValueError: bad row 7" in shown
    assert "3b7dc5" not in shown and "src/shop/other.py" not in shown and "ValueError: other" not in shown


def test_text_memo_computes_once_and_stays_within_its_character_bound():
    calls = []

    def length(text, option):
        calls.append(text)
        return len(text), option

    memo = TextMemo(length, max_chars=25, max_item_chars=20)
    assert memo("a" * 10, 1) == (10, 1) and memo("a" * 10, 1) == (10, 1)
    assert calls == ["a" * 10]
    memo("b" * 10)
    memo("c" * 10)  # 30 characters held > 25: the least recently used ("a…") goes
    memo("a" * 10, 1)
    assert calls.count("a" * 10) == 2
    memo("d" * 30)
    memo("d" * 30)  # bigger than one item may be: never held
    assert calls.count("d" * 30) == 2
