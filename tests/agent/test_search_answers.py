"""A search hands back answers, not only the turns that match: the neighbours of each hit, originals ahead of the
summaries that repeat them, date phrases read as days, and a ranking by meaning fused with the keywords."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

from agent.messages import SUMMARY_KEY, Message
from agent.search import DEFAULT_HITS, search_messages
from agent.search_answers import NEIGHBOUR_CHARS
from agent.tools import recovery_tools
from agent.tools.recovery import SEARCH_PARAMETERS
from gateway.session_source import ChatHistory, search_conversations
from gateway.store import SessionStore


def at(day: str, hour: int = 12) -> float:
    """Unix seconds of ``day`` (ISO) at ``hour`` UTC."""
    return dt.datetime.fromisoformat(day).replace(hour=hour, tzinfo=dt.UTC).timestamp()


def chat(*turns: tuple[str, str, str]) -> list[Message]:
    """Messages with ids 1.. from ``(day, role, text)``."""
    return [
        {"_id": str(n), "role": role, "content": text, "_ts": at(day, 8 + n % 12)}
        for n, (day, role, text) in enumerate(turns, start=1)
    ]


def test_the_answer_after_a_question_comes_with_the_hit_past_tool_plumbing():
    messages = chat(
        ("2023-05-01", "user", "I'm off to see Lumen Drift, the band I told you about"),
        ("2023-05-02", "assistant", "Have fun! Tell me how it went."),
        ("2023-05-03", "user", "how was the concert? you asked, so: let me think"),
        ("2023-05-03", "assistant", ""),
        ("2023-05-03", "tool", "weather: sunny"),
        ("2023-05-03", "assistant", "Sounds like the encore with the brass section was the high point."),
    )
    messages[3]["tool_calls"] = [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]
    messages[4]["tool_call_id"] = "c1"
    hits = search_messages(messages, "how was the concert", limit=1)
    assert hits[0].message_id == "3"
    assert hits[0].after is not None and hits[0].after.id == "6" and "encore with the brass" in hits[0].after.text
    assert hits[0].before is not None and (hits[0].before.id, hits[0].before.role) == ("2", "assistant")


def test_neighbours_stay_in_the_hit_s_conversation_and_are_clipped():
    long_answer = "The plan: " + "move the piano upstairs, " * 100
    messages: list[Message] = [
        {"_id": "old:9", "role": "user", "content": "unrelated older chat", "_session": "old"},
        {"_id": "1", "role": "user", "content": "where does the piano go?", "_session": "now"},
        {"_id": "2", "role": "assistant", "content": long_answer, "_session": "now"},
    ]
    hit = next(h for h in search_messages(messages, "where does the piano go") if h.message_id == "1")
    assert hit.before is None  # the message before it belongs to another conversation
    assert hit.after is not None and len(hit.after.text) <= NEIGHBOUR_CHARS
    assert hit.after.text.startswith("The plan: move the piano") and hit.after.text.endswith("…")
    first_turn = next(h for h in search_messages(messages, "unrelated older chat") if h.message_id == "old:9")
    assert first_turn.before is None and first_turn.after is None


def test_a_summary_ranks_behind_the_originals_it_repeats_but_stays_searchable():
    messages = chat(
        ("2023-05-01", "user", "We adopted a cat, her name is Biscuit"),
        ("2023-05-01", "assistant", "Biscuit is a lovely name for a cat!"),
        ("2023-05-02", "user", "what should I cook tonight?"),
    )
    summary: Message = {
        "_id": "9",
        "role": "user",
        "content": "[CONTEXT COMPACTION] The user adopted a cat, Biscuit, and asked about dinner.",
        "_ts": at("2023-05-05"),
        SUMMARY_KEY: True,
    }
    ranked = [hit.message_id for hit in search_messages([summary, *messages], "adopted cat Biscuit")]
    assert ranked == ["1", "2", "9"]
    # Without the summary flag the same text ranks ahead of an original: it is the flag that puts it behind.
    plain = {key: value for key, value in summary.items() if key != SUMMARY_KEY}
    assert [hit.message_id for hit in search_messages([plain, *messages], "adopted cat Biscuit")][:2] == ["1", "9"]


def diary() -> list[Message]:
    """Two weeks of Maya's chat: Saturday 2023-05-06 is the day asked about, the chat's newest day is 2023-05-10."""
    return chat(
        ("2023-04-24", "user", "last Saturday I painted the fence"),  # 2023-04-22: another Saturday
        ("2023-05-01", "user", "we should go to the farmers market some time"),
        ("2023-05-06", "user", "At the farmers market with Leo, the strawberries are in"),
        ("2023-05-06", "assistant", "Enjoy the strawberries!"),
        ("2023-05-08", "user", "Last Saturday I went kayaking on the river with my sister"),
        ("2023-05-08", "assistant", "Kayaking sounds wonderful."),
        ("2023-05-09", "user", "the budget spreadsheet is done"),
        ("2023-05-10", "user", "remind me about the dentist"),
    )


def test_last_saturday_finds_what_was_said_about_it_and_what_was_written_on_it():
    hits = search_messages(diary(), "what did she do last Saturday?")
    ids = [hit.message_id for hit in hits]
    assert ids[0] == "5"  # written on the Monday after, saying "last Saturday": the answer itself
    assert {"3", "4"} <= set(ids)  # written that Saturday
    assert "1" not in ids  # its "last Saturday" was two weeks earlier
    assert "kayaking" in hits[0].snippet


def test_keywords_and_a_date_together_put_the_dated_match_first():
    messages = [
        *diary(),
        {"_id": "9", "role": "user", "content": "the farmers market was closed today", "_ts": at("2023-05-10")},
    ]
    ids = [hit.message_id for hit in search_messages(messages, "farmers market last Saturday")]
    assert ids[0] == "3"  # the market on that Saturday, not the other two mentions
    assert ids.index("9") > ids.index("3") and ids.index("2") > ids.index("3")


def test_a_date_alone_lists_that_day_and_the_reference_day_can_be_given():
    ids = {hit.message_id for hit in search_messages(diary(), "2023-05-08")}
    assert ids == {"5", "6"}
    # Read from 2023-05-03, "yesterday" is 2023-05-02: nothing was written or said about that day.
    assert search_messages(diary(), "yesterday", now=dt.date(2023, 5, 3)) == []
    assert {hit.message_id for hit in search_messages(diary(), "yesterday")} == {"7"}  # from the newest day


def test_a_message_found_only_by_meaning_is_a_hit_and_without_meaning_nothing_changes():
    messages = chat(
        ("2023-05-01", "user", "the deploy broke the login page"),
        ("2023-05-02", "user", "the login page is slow again"),
        ("2023-05-03", "user", "the login page looks odd on phones"),
        ("2023-05-04", "user", "the login page has a typo"),
        ("2023-05-05", "user", "my grandmother's lasagne recipe uses nutmeg"),
    )
    keywords = [hit.message_id for hit in search_messages(messages, "login page")]
    assert keywords == ["4", "2", "1", "3"]
    assert search_messages(messages, "login page", similar=None) == search_messages(messages, "login page")
    fused = [hit.message_id for hit in search_messages(messages, "login page", similar=["3", "5"])]
    # The two best keyword hits stay first; then both rankings agree on 3, and 5 only the meaning index found.
    assert fused == ["4", "2", "3", "5", "1"]
    assert [h.message_id for h in search_messages(messages, "what did we talk about", similar=["5"])] == ["5"]


def test_the_tool_offers_more_hits_than_before():
    assert DEFAULT_HITS > 4
    assert SEARCH_PARAMETERS["properties"]["limit"]["maximum"] == 20  # type: ignore[index]


class Meanings:
    """A meaning index answering from a fixed list (what the embeddings index would return)."""

    def __init__(self, found: Sequence[tuple[str, str]] | None) -> None:
        self.found = found
        self.asked: list[tuple[str, str, int]] = []

    async def similar(self, chat: str, query: str, limit: int) -> list[tuple[str, str]] | None:
        self.asked.append((chat, query, limit))
        return None if self.found is None else list(self.found)


async def test_the_tool_foldgate_search_and_the_web_rank_alike(store: SessionStore):
    chat_key = "tg:41"
    first = await store.current_session(chat_key)
    lock = await store.acquire_lock(chat_key, 30)
    await store.append(
        chat_key,
        first,
        [
            {"role": "user", "content": "how was the concert at the harbour?"},
            {"role": "assistant", "content": "Loud and wonderful, the concert ran late."},
            {"role": "user", "content": "the harbour ferry leaves at nine"},
        ],
        lock=lock,
    )
    await store.commit_compaction(
        chat_key,
        first,
        [{"role": "user", "content": "[CONTEXT COMPACTION] a concert at the harbour", SUMMARY_KEY: True}],
        lock=lock,
        in_place=True,
        compaction_id="c1",
    )
    second = await store.new_session(chat_key, lock=lock)
    await store.append(chat_key, second, [{"role": "user", "content": "a quiet week, no concert"}], lock=lock)
    meanings = Meanings([(first, "3"), (second, "1")])
    history = ChatHistory(store, chat_key, second, every_session=True, meaning=meanings)
    search = recovery_tools(history)[0]
    result = json.loads(await search.handler({"query": "concert harbour"}))
    from_tool = [(hit.get("session", ""), str(hit["message_id"]).rpartition(":")[2]) for hit in result["hits"]]
    found = await search_conversations(store, chat_key, second, "concert harbour", meaning=meanings)
    assert from_tool == [(hit.session_id, hit.message_id) for hit in found]
    assert meanings.asked and meanings.asked[0][0] == chat_key
    originals = [i for i, hit in enumerate(found) if hit.session_id == first and not hit.snippet.startswith("[")]
    summary = next(i for i, hit in enumerate(found) if hit.snippet.startswith("[CONTEXT COMPACTION]"))
    assert summary > min(originals)  # kept, but behind the originals
    question = next(hit for hit in found if hit.snippet.startswith("how was the concert"))
    assert question.after is not None and "Loud and wonderful" in question.after.text
    assert question.after.id == f"{first}:2"  # as session_fetch takes it


async def test_meaning_ids_become_the_history_s_ids_and_an_absent_index_costs_nothing(store: SessionStore):
    chat_key = "tg:42"
    first = await store.current_session(chat_key)
    lock = await store.acquire_lock(chat_key, 30)
    await store.append(chat_key, first, [{"role": "user", "content": "older words"}], lock=lock)
    second = await store.new_session(chat_key, lock=lock)
    await store.append(chat_key, second, [{"role": "user", "content": "newer words"}], lock=lock)
    found = [(second, "1"), (first, "1"), ("someone-else", "4")]
    everything = ChatHistory(store, chat_key, second, every_session=True, meaning=Meanings(found))
    assert await everything.similar("words", 5) == ["1", f"{first}:1"]
    current_only = ChatHistory(store, chat_key, second, meaning=Meanings(found))
    assert await current_only.similar("words", 5) == ["1"]
    assert await ChatHistory(store, chat_key, second, meaning=Meanings(None)).similar("words", 5) is None
    assert await ChatHistory(store, chat_key, second).similar("words", 5) is None
    away = json.loads(
        await recovery_tools(ChatHistory(store, chat_key, second, every_session=True, meaning=Meanings(None)))[
            0
        ].handler({"query": "newer words"})
    )
    assert [hit["message_id"] for hit in away["hits"]][0] == "1"


class BrokenMeanings:
    """A meaning index whose embeddings endpoint is down."""

    async def similar(self, chat: str, query: str, limit: int) -> list[tuple[str, str]] | None:
        raise ConnectionError("embeddings endpoint refused the connection")


async def test_a_meaning_index_that_fails_leaves_the_keyword_search(store: SessionStore):
    chat_key = "tg:43"
    sid = await store.current_session(chat_key)
    lock = await store.acquire_lock(chat_key, 30)
    await store.append(chat_key, sid, [{"role": "user", "content": "the spare key is under the blue pot"}], lock=lock)
    search = recovery_tools(ChatHistory(store, chat_key, sid, every_session=True, meaning=BrokenMeanings()))[0]
    result = json.loads(await search.handler({"query": "spare key"}))
    assert [hit["message_id"] for hit in result["hits"]] == ["1"]


def test_a_written_out_date_also_finds_a_log_line_stamped_with_it_long_after():
    messages = [
        *diary(),
        {"_id": "9", "role": "tool", "content": "2023-05-08 03:12 ERROR disk full", "_ts": at("2023-09-30")},
    ]
    ids = [hit.message_id for hit in search_messages(messages, "2023-05-08")]
    assert set(ids[:2]) == {"5", "6"} and "9" in ids  # that day's messages first, then the stamped line
