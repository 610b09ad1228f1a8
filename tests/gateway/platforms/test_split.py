"""The reply splitter: within the platform's limit in its own units, nothing lost or reordered, fences kept valid."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.platforms.split import split_message, text_units

OPENING = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
BARE_FENCE = re.compile(r"^(`{3,}|~{3,})$")


def utf16_units(text: str) -> int:
    """Independent of the module under test: what Telegram counts."""
    return len(text.encode("utf-16-le")) // 2


def fences_balanced(chunk: str) -> bool:
    marker: str | None = None
    for line in chunk.split("\n"):
        match = OPENING.match(line.rstrip("\r"))
        if not match:
            continue
        fence, rest = match.groups()
        if marker is None:
            marker = fence
        elif fence[0] == marker[0] and len(fence) >= len(marker) and not rest.strip():
            marker = None
    return marker is None


def align(text: str, chunks: list[str]) -> list[tuple[int, int, str, str]]:
    """Find each chunk's body in ``text`` in order, peeling off added fence lines.

    Returns (start, end, added opening line, added closing line) per chunk and asserts that
    everything between bodies, and after the last, is whitespace.
    """
    position = 0
    found = []
    for chunk in chunks:
        lines = chunk.split("\n")
        head = lines[0] if len(lines) > 1 and OPENING.match(lines[0]) else None
        tail = lines[-1] if len(lines) > 1 and BARE_FENCE.match(lines[-1]) else None
        options = [(chunk, "", "")]
        if head is not None:
            options.append((chunk[len(head) + 1 :], head, ""))
        if tail is not None:
            options.append((chunk[: -len(tail) - 1], "", tail))
        if head is not None and tail is not None and len(lines) > 2:
            options.append((chunk[len(head) + 1 : -len(tail) - 1], head, tail))
        gap_end = position
        while gap_end < len(text) and text[gap_end].isspace():
            gap_end += 1
        match = next(
            (
                (start, body, opened, closed)
                for body, opened, closed in options
                for start in range(position, gap_end + 1)
                if text.startswith(body, start)
            ),
            None,
        )
        assert match is not None, f"chunk not found in order after position {position}: {chunk[:80]!r}"
        start, body, opened, closed = match
        assert text[position:start].strip() == "", "something other than whitespace was dropped"
        found.append((start, start + len(body), opened, closed))
        position = start + len(body)
    assert text[position:].strip() == ""
    return found


# --------------------------------------------------------------------------- generated replies

GLUE = {"\u0301", "\u0308", "\u20dd", "\u200d", "\ufe0f", "\U0001f3fd"}
REGIONAL = re.compile("[\U0001f1e6-\U0001f1ff]")

words = st.one_of(
    st.text(alphabet="abcdefghij", min_size=1, max_size=12),
    st.sampled_from(
        [
            "日本語の文章です。",
            "中文句子！",
            "e\u0301te\u0301",
            "nai\u0308ve",
            "a\u0301\u0308\u20dd",
            "😀",
            "👍🏽",
            "👨\u200d👩\u200d👧",
            "🇩🇪🇫🇷",
            "❤\ufe0f",
            "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
            "end.",
            "why?",
            "wow!",
            "“quoted.”",
            "x\u00a0y",
            "https://example.com/a/very/long/path?with=query&and=more",
        ]
    ),
)
sentences = st.lists(words, min_size=1, max_size=30).map(" ".join)
paragraphs = st.lists(sentences, min_size=1, max_size=4).map("\n".join)
code_lines = st.lists(
    st.one_of(
        st.text(alphabet="abc=()+_ 0123456789", max_size=60).map(str.rstrip),
        st.sampled_from(["    return 😀", "    x = 'e\u0301'", "", "\tindented", "    " + "z" * 90]),
    ),
    min_size=1,
    max_size=25,
).filter(lambda lines: any(line.strip() for line in lines))
code_blocks = st.tuples(
    st.sampled_from(["```", "````", "~~~"]), st.sampled_from(["", "python", "js", "c++"]), code_lines
).map(lambda block: f"{block[0]}{block[1]}\n" + "\n".join(block[2]) + f"\n{block[0]}")
replies = st.lists(st.one_of(paragraphs, paragraphs, code_blocks), min_size=1, max_size=12).map("\n\n".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=replies, limit=st.integers(min_value=40, max_value=600), units=st.sampled_from(["utf16", "chars"]))
def test_chunks_fit_keep_everything_in_order_and_keep_fences_balanced(text: str, limit: int, units: str) -> None:
    chunks = split_message(text, limit, units=units)  # type: ignore[arg-type]
    measure = utf16_units if units == "utf16" else len
    assert chunks, "a reply with text must produce at least one message"
    for chunk in chunks:
        assert measure(chunk) <= limit
        assert chunk.strip(), "no empty or blank message"
        assert fences_balanced(chunk), chunk
    placed = align(text, chunks)
    opening_lines = {m.group(1) + m.group(2) for m in map(OPENING.match, text.split("\n")) if m}
    for index, (start, end, opened, _closed) in enumerate(placed):
        assert not opened or opened in opening_lines or opened.strip("`~") == ""
        body = text[start:end]
        if index and start == placed[index - 1][1]:
            # nothing dropped, so a hard cut: it must not separate a character from what extends it
            assert body[:1] not in GLUE and text[start - 1] != "\u200d"
        assert len(REGIONAL.findall(body)) % 2 == 0, "a flag was cut in half"
    if len(chunks) == 1:
        assert chunks[0] == text  # a reply that fits is sent unchanged


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(min_size=1, max_size=3000),
    limit=st.integers(min_value=2, max_value=300),
    units=st.sampled_from(["utf16", "chars"]),
)
def test_arbitrary_text_never_exceeds_the_limit_and_loses_only_whitespace(text: str, limit: int, units: str) -> None:
    chunks = split_message(text, limit, units=units)  # type: ignore[arg-type]
    measure = utf16_units if units == "utf16" else len
    assert all(measure(chunk) <= limit and chunk.strip() for chunk in chunks)
    if "```" not in text and "~~~" not in text:  # no fences: the chunks are the text minus whitespace at cuts
        align(text, chunks)


# --------------------------------------------------------------------------- preferences, one at a time


def test_paragraph_breaks_are_preferred_over_lines_sentences_and_words() -> None:
    rng = random.Random(1)
    paragraphs = [
        ". ".join(
            " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(8))
            for _ in range(rng.randint(3, 9))
        )
        + "."
        for _ in range(60)
    ]
    text = "\n\n".join(p.replace(". ", ".\n", 1) for p in paragraphs)  # every paragraph also has a line break
    chunks = split_message(text, 1000)
    assert len(chunks) > 5
    for _, end, _, _ in align(text, chunks)[:-1]:
        assert text[end : end + 2] == "\n\n", "cut somewhere other than a paragraph break"


def test_without_paragraphs_a_line_break_then_a_sentence_then_a_space_is_used() -> None:
    lines = "\n".join(f"line {i} " + " ".join(["word"] * 20) for i in range(40))
    for _, end, _, _ in align(lines, split_message(lines, 500))[:-1]:
        assert lines[end] == "\n"
    prose = " ".join(f"Sentence {i} has some words in it." for i in range(100))
    for _, end, _, _ in align(prose, split_message(prose, 500))[:-1]:
        assert prose[end - 1] == "."
    words = " ".join(f"word{i}" for i in range(400))
    for _, end, _, _ in align(words, split_message(words, 500))[:-1]:
        assert words[end] == " " and words[end - 1] != " "


def test_a_break_that_would_leave_the_chunk_under_half_full_is_skipped_for_a_lower_level_one() -> None:
    text = "Short opening paragraph.\n\n" + "one two three four five six seven eight nine ten " * 30
    first = split_message(text, 400)[0]
    assert len(first) > 200 and first.startswith("Short opening paragraph.\n\none")


def test_hard_cuts_keep_characters_whole_and_count_astral_characters_as_two_units() -> None:
    thumbs = "👍🏽" * 3000  # 4 UTF-16 units each, no spaces anywhere
    chunks = split_message(thumbs, 4096, units="utf16")
    assert "".join(chunks) == thumbs
    assert all(utf16_units(c) <= 4096 and c.count("👍") == c.count("🏽") for c in chunks)
    assert len(chunks) == 3  # 12,000 units; counted as characters it would wrongly be 2
    accented = "e\u0301" * 500
    chunks = split_message(accented, 101)
    assert "".join(chunks) == accented and all(not c.startswith("\u0301") for c in chunks)
    family = "👨\u200d👩\u200d👧" * 100
    chunks = split_message(family, 50, units="utf16")
    assert "".join(chunks) == family and all(c.startswith("👨") and c.endswith("👧") for c in chunks)


def test_a_cluster_wider_than_the_limit_is_still_delivered() -> None:
    text = "a" + "\u0301" * 50
    assert "".join(split_message(text, 10)) == text


# --------------------------------------------------------------------------- code fences


def test_a_split_code_block_is_closed_and_reopened_with_its_info_string() -> None:
    code = "\n".join(f"    total += values[{i}]  # step {i}" for i in range(60))
    text = f"Here is the fix:\n\n```python\ndef run(values):\n    total = 0\n{code}\n    return total\n```\n\nDone."
    chunks = split_message(text, 700)
    assert len(chunks) >= 3
    assert chunks[0].endswith("\n```") and chunks[1].startswith("```python\n") and chunks[-1].endswith("Done.")
    for chunk in chunks:
        assert len(chunk) <= 700 and fences_balanced(chunk)
    middle = chunks[1].split("\n")
    assert middle[1].startswith("    total += ")  # indentation survives the cut
    joined = "\n".join(text[start:end] for start, end, _, _ in align(text, chunks))
    assert [line for line in joined.split("\n") if "step" in line] == code.split("\n")


def test_tilde_and_long_fences_reopen_with_the_same_marker() -> None:
    body = "\n".join(f"``` inner line {i} ```" for i in range(40))
    text = f"````markdown\n{body}\n````"
    chunks = split_message(text, 300)
    assert all(c.startswith("````markdown\n") and c.endswith("\n````") for c in chunks)
    tilde = "~~~sh\n" + "\n".join(f"echo {i}" for i in range(100)) + "\n~~~"
    assert all(c.startswith("~~~sh\n") and c.endswith("\n~~~") for c in split_message(tilde, 120))


def test_an_unclosed_block_stays_unclosed_only_in_the_last_chunk() -> None:
    text = "```js\n" + "\n".join(f"console.log({i});" for i in range(100))
    chunks = split_message(text, 300)
    assert all(c.endswith("\n```") for c in chunks[:-1]) and not chunks[-1].endswith("```")
    align(text, chunks)


def test_fence_lines_too_long_for_the_limit_fall_back_to_the_bare_marker() -> None:
    info = "python title=" + "x" * 40
    text = f"```{info}\n" + "\n".join(f"a = {i}" for i in range(50)) + "\n```"
    chunks = split_message(text, 100)
    assert chunks[0].startswith(f"```{info}\n") and chunks[1].startswith("```\na = ")
    assert all(len(c) <= 100 and fences_balanced(c) for c in chunks)


# --------------------------------------------------------------------------- edges and the whitespace rule


def test_edges() -> None:
    assert split_message("", 10) == []
    assert split_message(" \n\t\n ", 10) == []
    assert split_message("  fits, kept as is\n", 100) == ["  fits, kept as is\n"]
    with pytest.raises(ValueError):
        split_message("x", 0)
    with pytest.raises(ValueError):
        split_message("x", 1, units="utf16")
    with pytest.raises(ValueError):
        split_message("x", 10, units="bytes")  # type: ignore[arg-type]


def test_only_whitespace_at_cut_points_is_dropped() -> None:
    text = "first paragraph here\n\n\n   \n  second one is indented\n" + "   " * 10 + "x" * 30
    chunks = split_message(text, 30)
    assert chunks[0] == "first paragraph here"
    assert chunks[1].startswith("  second one")  # indentation after the last line break is kept
    blanks = " " * 5050 + "tail"
    assert split_message(blanks, 100) == [" " * 50 + "tail"]  # blank windows are not messages
    assert all(c.strip() == c for c in split_message("word " * 100 + "end", 37))
    glued = "a\u00a0b " * 40  # no-break spaces are never cut at
    assert all(not c.startswith("\u00a0") and not c.endswith("\u00a0") for c in split_message(glued, 21))


def test_text_units_counts_what_telegram_counts() -> None:
    sample = "aé日😀👍🏽\u0301"
    assert text_units(sample, "utf16") == utf16_units(sample) == 10
    assert text_units(sample, "chars") == len(sample) == 7


def test_a_long_reply_with_every_kind_of_content_splits_and_rejoins() -> None:
    rng = random.Random(7)
    parts = []
    for index in range(300):
        if index % 25 == 0:
            parts.append(
                "```python\n" + "\n".join(f"    value_{k} = compute({k})" for k in range(rng.randint(5, 80))) + "\n```"
            )
        else:
            parts.append(
                " ".join(
                    rng.choice(["déjà", "vu", "😀", "日本", "ok.", "fine!", "word"]) for _ in range(rng.randint(10, 60))
                )
            )
    text = "\n\n".join(parts)
    assert len(text) > 50_000
    chunks = split_message(text, 4096, units="utf16")
    assert all(utf16_units(c) <= 4096 and fences_balanced(c) for c in chunks)
    align(text, chunks)
    assert text.count("😀") == sum(c.count("😀") for c in chunks)
