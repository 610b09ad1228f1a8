"""A prepared corpus finds what the message-by-message search finds: the same hits, in the same order."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.search import SearchHit, search_messages
from agent.search_corpus import SearchCorpus
from agent.tools.recovery import SEARCH_NEIGHBOUR_CHARS, SEARCH_SNIPPET_CHARS, search_source, searchable
from gateway.session_source import ChatHistory
from gateway.store import SessionStore

#: Words, identifiers and characters that change under lower(): "İ" grows, "Σ" lowers by its context, "ẞ"
#: and "K" (Kelvin) lower to ASCII-looking letters; NUL is the corpus's own separator.
WORDS = [
    "Pottery",
    "pottery",
    "class",
    "Maya",
    "MAYA",
    "started",
    "starting",
    "retry",
    "apply_retry_backoff",
    "8577e17",
    "8577e17c0ffee",
    "#4821",
    "PR",
    "4821",
    "14821",
    "src/app.py",
    "ERR_TIMEOUT",
    "İstanbul",
    "İ",
    "ΣΟΦΙΑ",
    "Σ",
    "ẞtraße",
    "\u212aelvin",
    "brake",
    "pads",
    "é",
    "\x00",
    "naïve",
    "x",
]
SEPARATORS = [" ", " ", " ", "\n", "-", "_", ".", "/", "'", "#", ""]

words = st.sampled_from(WORDS)
texts = st.lists(st.tuples(words, st.sampled_from(SEPARATORS)), max_size=12).map(
    lambda pairs: "".join(word + sep for word, sep in pairs)
)


@st.composite
def message(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["user", "assistant", "call", "tool", "items", "parts", "summary"]))
    text = draw(texts)
    if kind == "call":
        arguments = {"query": draw(texts), "path": draw(words)}
        call = {
            "id": f"c{draw(st.integers(0, 5))}",
            "function": {"name": draw(words), "arguments": json.dumps(arguments)},
        }
        return {"role": "assistant", "content": text or None, "tool_calls": [call]}
    if kind == "tool":
        named = draw(st.booleans())
        return {"role": "tool", "tool_call_id": f"c{draw(st.integers(0, 5))}", "content": text} | (
            {"name": "grep"} if named else {}
        )
    if kind == "items":
        return {"role": "user", "content": text, "_items": [{"kind": "image", "name": draw(texts), "sha": "ab"}]}
    if kind == "parts":
        return {"role": "user", "content": [{"type": "text", "text": text}, {"type": "text", "text": draw(texts)}]}
    if kind == "summary":
        return {"role": "user", "content": text, "_compressed_summary": True}
    return {"role": kind, "content": text}


def numbered(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**m, "_id": str(index), "_ts": 1_750_000_000 + 3_600 * index} for index, m in enumerate(messages)]


queries = st.one_of(
    st.lists(words, min_size=1, max_size=4).map(" ".join),
    st.lists(words, min_size=1, max_size=3).map(lambda picked: '"' + " ".join(picked) + '"'),
    st.tuples(words, words).map(lambda pair: f'{pair[0]} "{pair[1]} pads"'),
    st.text(alphabet='aMİΣx#48_. \x00"', min_size=1, max_size=12),
)
histories = st.lists(message(), max_size=30).map(numbered)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(histories, queries, st.integers(1, 8))
def test_a_corpus_finds_what_the_scan_finds(messages: list[dict[str, Any]], query: str, limit: int) -> None:
    expected = search_messages(messages, query, limit=limit, snippet_chars=120, neighbour_chars=40)
    corpus = SearchCorpus.build(messages)
    assert search_messages(messages, query, limit=limit, snippet_chars=120, neighbour_chars=40, corpus=corpus) == (
        expected
    )


@SETTINGS
@given(histories, st.lists(st.integers(0, 30), max_size=5), queries)
def test_an_extended_corpus_finds_what_the_scan_finds(
    messages: list[dict[str, Any]], cuts: list[int], query: str
) -> None:
    """Built from the oldest messages and extended (in several steps) with the newer ones, as a cached archive's
    corpus is extended with what compaction archived since and with a call's live messages."""
    points = sorted({min(cut, len(messages)) for cut in cuts} | {len(messages)})
    corpus = SearchCorpus.build(messages[: points[0]])
    for start, end in zip(points, points[1:]):
        older = corpus
        corpus = corpus.extended(messages[start:end])
        assert len(older) == start  # extending leaves the corpus it extends as it was
    assert len(corpus) == len(messages)
    assert search_messages(messages, query, corpus=corpus) == search_messages(messages, query)


def test_a_corpus_keeps_the_tool_names_of_calls_and_finds_a_tool_result_by_its_tool() -> None:
    messages = numbered(
        [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "grep"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ERR_TIMEOUT in worker"},
        ]
    )
    corpus = SearchCorpus.build(messages[:1]).extended(messages[1:])
    [hit] = search_messages(messages, "ERR_TIMEOUT", corpus=corpus)
    assert (hit.message_id, hit.tool_name) == ("1", "grep")
    assert corpus.tool_name("c1") == "grep" and corpus.tool_name("c2") is None


def test_a_corpus_of_other_messages_is_refused() -> None:
    messages = numbered([{"role": "user", "content": "pottery class"}])
    with pytest.raises(ValueError, match="corpus"):
        search_messages(messages + messages, "pottery", corpus=SearchCorpus.build(messages))


def test_a_regex_search_reads_the_corpus_texts_and_finds_the_same() -> None:
    messages = numbered([{"role": "user", "content": "Maya started pottery"}, {"role": "user", "content": "İstanbul"}])
    corpus = SearchCorpus.build(messages)
    assert search_messages(messages, "/pott?ery/", corpus=corpus) == search_messages(messages, "/pott?ery/")
    assert [hit.message_id for hit in search_messages(messages, "/İst/", corpus=corpus)] == ["1"]


# The chat's archives kept between searches (gateway.session_source): what a search reads and finds.


async def expected_hits(history: ChatHistory, query: str) -> list[SearchHit]:
    """What the search finds reading every message anew (no kept archive, no corpus)."""
    messages = searchable(await history.all_messages())
    return search_messages(
        messages, query, snippet_chars=SEARCH_SNIPPET_CHARS, neighbour_chars=SEARCH_NEIGHBOUR_CHARS, limit=6
    )


def counting_reads(store: SessionStore) -> list[str]:
    """The ids the store's ``get_messages`` is asked for from now on (the kept archives read them that way)."""
    asked: list[str] = []
    read = store.get_messages

    async def get_messages(chat: str, sid: str, ids: Any) -> list[Any]:
        asked.extend(str(i) for i in ids)
        return await read(chat, sid, ids)

    store.get_messages = get_messages  # type: ignore[method-assign]
    return asked


async def compact_in_place(store: SessionStore, chat: str, sid: str, lock: Any, name: str, keep: int = 1) -> None:
    active = await store.active(chat, sid)
    summary = {"role": "user", "content": f"[CONTEXT COMPACTION] summary {name}", "_compressed_summary": True}
    await store.commit_compaction(
        chat, sid, [summary, *active[-keep:]], lock=lock, in_place=True, compaction_id=f"{name}-{sid}"
    )


async def test_a_kept_archive_reads_only_what_compaction_added_and_finds_what_reading_it_all_finds(
    store: SessionStore,
) -> None:
    chat = "tg:corpus"
    first = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 30)
    lines = ["Maya started the pottery class on Tuesday", "the brake pads were replaced", "PR #4821 fixed İstanbul"]
    await store.append(chat, first, [{"role": "user", "content": line} for line in lines], lock=lock)
    await compact_in_place(store, chat, first, lock, "one")
    second = await store.new_session(chat, lock=lock)
    call = {"id": "s1", "type": "function", "function": {"name": "session_search", "arguments": '{"query": "pottery"}'}}
    await store.append(
        chat,
        second,
        [
            {"role": "user", "content": "when did the pottery class start?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "s1", "content": "pottery pottery pottery"},
            {"role": "assistant", "content": "Maya started pottery on Tuesday"},
        ],
        lock=lock,
    )
    await compact_in_place(store, chat, second, lock, "two")
    history = ChatHistory(store, chat, second, every_session=True)
    asked = counting_reads(store)
    for query in ("pottery class", "#4821", "İstanbul", '"brake pads"', "summary"):
        hits, _ = await search_source(history, query)
        assert hits == await expected_hits(history, query)
    assert len(asked) == len(await store.archive(chat, first)) + len(await store.archive(chat, second))  # once each

    asked.clear()
    await store.append(chat, second, [{"role": "user", "content": "the kiln at the pottery class broke"}], lock=lock)
    await compact_in_place(store, chat, second, lock, "three")
    hits, _ = await search_source(history, "pottery kiln")
    assert hits == await expected_hits(history, "pottery kiln")
    assert hits[0].snippet == "the kiln at the pottery class broke"
    grown = await store.archive(chat, second)
    assert asked == [m["_id"] for m in grown[-len(asked) :]] and 0 < len(asked) < len(grown)  # the new ids only


async def test_an_archive_that_changed_other_than_by_growing_is_read_again_whole(
    store: SessionStore, redis: Any
) -> None:
    chat = "tg:rewritten"
    sid = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 30)
    await store.append(chat, sid, [{"role": "user", "content": f"line {n} about pottery"} for n in range(4)], lock=lock)
    await compact_in_place(store, chat, sid, lock, "one")
    history = ChatHistory(store, chat, sid, every_session=True)
    assert (await search_source(history, "pottery"))[0] == await expected_hits(history, "pottery")
    archive = store.keys(chat).archive(sid)
    ids = await redis.lrange(archive, 0, -1)
    await redis.delete(archive)
    await redis.rpush(archive, *reversed(ids), ids[0])  # as long and longer, but not what was read
    hits, _ = await search_source(history, "pottery")
    assert hits == await expected_hits(history, "pottery")
    assert hits


async def test_a_rotated_conversation_is_searched_as_reading_it_all_would(store: SessionStore) -> None:
    chat = "tg:rotated"
    first = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 30)
    await store.append(
        chat,
        first,
        [{"role": "user", "content": "the pottery class is on Tuesday"}, {"role": "assistant", "content": "noted"}],
        lock=lock,
    )
    active = await store.active(chat, first)
    rotated = await store.commit_compaction(
        chat, first, [{"role": "user", "content": "summary"}, active[-1]], lock=lock, in_place=False, compaction_id="r"
    )
    history = ChatHistory(store, chat, rotated.session_id, every_session=True)
    for query in ("pottery", "noted", "summary"):
        assert (await search_source(history, query))[0] == await expected_hits(history, query)
