"""Deterministic notes of everyday conversation: people and relations, dated events, plans, likes, feelings."""

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from agent.compaction import framing, notes
from agent.compaction.anchors import anchors_in
from agent.compaction.digest import MAX_EVERYDAY_PER_KIND, Digest, Line, build_digest
from agent.compaction.everyday import ADDRESS_WORDS, ORDINARY_CAPITALS, remarks
from agent.compaction.fallback_summary import render_body
from agent.compaction.summary_prompt import SECTION_HEADINGS, SYSTEM_PROMPT, missing_sections, transcript_entries
from agent.tokens import count_message
from tests.fakes.histories import Transcript

#: The summary room the engine gives at an 8K window (5% of it, the header taken out, at least 500).
ROOM_8K = 500


def ts(month: int, day: int, hour: int = 12) -> float:
    return dt.datetime(2023, month, day, hour, tzinfo=dt.UTC).timestamp()


def chat() -> list[dict]:
    """Two friends and an assistant over two sessions, a month apart."""
    rows = [
        ("user", "Jo", ts(5, 8), "Hey Maya! How was your weekend?"),
        ("user", "Maya", ts(5, 8), "Wow Jo, so much happened! I started a pottery class last Saturday."),
        ("user", "Maya", ts(5, 8, 13), "My sister Ana came along. Her husband Tom is a chef."),
        ("user", "Jo", ts(5, 8, 14), "Ha! I love hiking but honestly I can't stand cilantro."),
        ("user", "Maya", ts(5, 8, 15), "We're going to Lisbon next month! Bye Jo!"),
        ("assistant", None, ts(5, 8, 16), "Have a great trip. I'll remind you both next Friday to book the flights."),
        ("user", "Jo", ts(6, 2), "Thanks Maya! My dog Biscuit got sick yesterday, I'm so worried."),
        ("user", "Maya", ts(6, 2, 13), "Oh no, poor Biscuit. I'll send you the recipe for the soup."),
        ("user", "Jo", ts(6, 2, 14), "Good night Maya!"),
    ]
    messages = []
    for n, (role, sender, when, text) in enumerate(rows, 1):
        message = {"role": role, "content": text, "_id": f"m-{n}", "_ts": when}
        if sender:
            message["_from"] = sender
        messages.append(message)
    return messages


def digest_of(messages: list[dict]) -> Digest:
    digest, _ = build_digest(messages, [count_message(m) for m in messages])
    return digest


def compose(digest: Digest, room: int = ROOM_8K) -> str:
    """The deterministic summary as the engine composes it (notes.summary_text's shares, no model)."""
    return framing.compose(
        digest,
        room,
        model_notes=None,
        render_body=lambda budget, quoted, said: render_body(digest, budget, quoted_ids=quoted, said=said),
        retained=lambda anchor: False,
        body_share=notes.DETERMINISTIC_BODY_SHARE,
        quote_share=notes.QUOTE_SHARE,
        listing_share=notes.LISTING_SHARE,
        model_share=notes.MODEL_NOTES_SHARE,
    ).text


def notes_only(digest: Digest, budget: int = 1_500) -> str:
    """The deterministic notes alone (nothing quoted below them, so every remark is listed)."""
    return render_body(digest, budget)


def section(text: str, heading: str) -> str:
    return text.split(heading + "\n", 1)[1].split("\n## ")[0]


def test_people_and_their_relations_are_named_with_who_said_it_and_when():
    text = notes_only(digest_of(chat()))
    people = section(text, "## Critical Context")
    assert "[m-3] Ana: Maya's sister (2023-05-08)" in people  # "my sister": the speaker is in the relation
    assert "[m-3] Tom: her husband (Maya, 2023-05-08)" in people
    assert "[m-7] Biscuit: Jo's dog (2023-06-02)" in people


def test_a_message_quoted_whole_is_not_listed_again_in_the_notes():
    text = compose(digest_of(chat()), room=1_500)
    assert "[m-3] My sister Ana came along." in text
    assert "[m-3] Ana: Maya's sister" not in text


def test_events_lead_with_their_resolved_iso_day():
    text = notes_only(digest_of(chat()))
    context = section(text, "## Critical Context")
    assert "### Events" in context
    assert "[m-2] 2023-05-06 Maya: started a pottery class" in context
    assert "[m-7] 2023-06-01 Jo: My dog Biscuit got sick" in context


def test_plans_and_promises_are_next_steps_and_likes_are_preferences():
    text = notes_only(digest_of(chat()))
    steps = section(text, "## Next Steps")
    assert "[m-5] 2023-05-08 Maya: We're going to Lisbon in 2023-06 ('next month')" in steps
    assert "[m-8] 2023-06-02 Maya: I'll send you the recipe for the soup" in steps
    assert "2023-05-12 the assistant: I'll remind you both to book the flights" in steps
    likes = section(text, "## Constraints & Preferences")
    assert "2023-06-02 Jo" not in likes and "[m-4] 2023-05-08 Jo: love hiking but" in likes
    assert "can't stand cilantro" in likes
    assert "(none recorded)" not in likes


def test_no_greeting_is_a_name_or_a_decision():
    digest = digest_of(chat())
    text = compose(digest, room=1_500)
    names = set(digest.anchors.entries.get("name") or {})
    assert not any(name.split()[0] in ORDINARY_CAPITALS for name in names), names
    for greeting in ("Wow Jo", "Bye Jo", "Thanks Maya", "Hey Maya", "Good night Maya"):
        assert greeting not in names
        assert f"{greeting}:" not in text
    assert section(text, "## Key Decisions").strip() == "- (none recorded)"


def test_at_an_8k_window_the_notes_hold_everyday_facts_within_the_same_budget():
    """At the smallest room a person, an event and a plan all fit (a person's message quoted whole)."""
    small = compose(digest_of(chat()))
    assert missing_sections(small) == []
    assert [line for line in small.splitlines() if line.startswith("## ")][: len(SECTION_HEADINGS)] == list(
        SECTION_HEADINGS
    )
    assert "### Events" in small and "### Plans & Promises" in small
    assert "[m-3] My sister Ana came along." in small  # who is who: quoted whole, its relation beside the name
    assert "[m-7] 2023-06-01 Jo: My dog Biscuit got sick" in small  # quoted too, yet listed: the quote says "yesterday"
    big = compose(digest_of(chat()), room=1_500)
    said = [m["content"] for m in chat() if m["role"] == "user"]
    assert all(text in big for text in said)
    assert not all(text in small for text in said)


def mixed() -> list[dict]:
    t = Transcript(system=None)
    t.user("Migrate the billing service. Never touch the legacy/ directory.")
    t.call("run_tests", {}, "FAILED tests/test_invoice.py::test_total - AssertionError: 10.01 != 10.00")
    t.assistant("We decided to use Decimal for money. Updated billing/invoice.py.")
    t.user("Good. My sister Ana started at the bakery last Monday, so I'm off early.")
    messages = t.messages
    for n, message in enumerate(messages):
        message["_ts"] = ts(5, 8, 9) + 60 * n
    return messages


def test_engineering_sentences_keep_their_sections_beside_everyday_ones():
    text = compose(digest_of(mixed()), room=3_000)
    assert missing_sections(text) == []
    assert "We decided to use Decimal for money." in section(text, "## Key Decisions")
    assert "Never touch the legacy/ directory" in section(text, "## Constraints & Preferences")
    assert "billing/invoice.py" in section(text, "## Relevant Files")
    assert "AssertionError: 10.01 != 10.00" in section(text, "## Progress")
    context = section(text, "## Critical Context")
    assert "Ana: the user's sister (2023-05-08)" in context
    assert "2023-05-01 the user: My sister Ana started at the bakery" in context


def test_remarks_persist_across_compactions_and_old_states_still_load():
    first = digest_of(chat()[:5])
    restored = Digest.from_state(first.to_state())
    assert restored is not None
    assert [line.text for line in restored.everyday] == [line.text for line in first.everyday]
    second = digest_of(chat()[5:]).merge(restored)
    texts = [line.text for line in second.everyday]
    assert any(text.startswith("2023-05-06 Maya: started a pottery class") for text in texts)
    assert any(text.startswith("Biscuit: Jo's dog") for text in texts)
    old_state = first.to_state()
    del old_state["everyday"]
    old = Digest.from_state(old_state)
    assert old is not None and old.everyday == []


def test_remarks_are_bounded_per_kind_and_a_relation_said_again_is_kept_once():
    digest = Digest(everyday=[Line(f"e{n}", f"m-{n}", n, "event", 5) for n in range(MAX_EVERYDAY_PER_KIND + 50)])
    digest.everyday += [Line("Ana: Maya's sister (Maya, 2023-05-08)", "m-1", 1, "person", 4)]
    older = Digest(everyday=[Line("Ana: Maya's sister (Maya, 2023-04-01)", "m-0", 0, "person", 4)])
    merged = digest.merge(older)
    assert sum(line.kind == "event" for line in merged.everyday) == MAX_EVERYDAY_PER_KIND
    assert [line.text for line in merged.everyday if line.kind == "person"] == ["Ana: Maya's sister (Maya, 2023-05-08)"]


def test_the_summarizer_is_told_about_everyday_facts_and_sees_each_day_and_sender():
    for words in ("who they are to whom", "ISO date", "plans and promises", "likes", "never a name or a decision"):
        assert words in SYSTEM_PROMPT, words
    messages = chat()
    entries = transcript_entries(messages, [count_message(m) for m in messages], {}, 10_000)
    assert entries[0].text == "[m-1] user: Hey Maya! How was your weekend?\n  (from Jo, sent 2023-05-08)"
    assert entries[1].text.endswith("(from Maya)")
    assert entries[6].text.endswith("(from Jo, sent 2023-06-02)")


NAMES = st.sampled_from(["Maya", "Jo", "Ana Silva", "Tom Baker", "Priya", "Li Wei"])


@given(st.sampled_from(sorted(ADDRESS_WORDS)), NAMES, st.sampled_from(["!", ",", "", "."]))
def test_a_greeting_before_a_name_never_becomes_part_of_it(word, name, mark):
    text = f"{word} {name}{mark} We should catch up soon."
    for _, anchor in anchors_in(text, True):
        assert anchor.split()[0] not in ORDINARY_CAPITALS
    said = remarks(text, "Jo", dt.date(2023, 5, 8), True)
    for remark in said.items:
        assert remark.kind != "person" or remark.text.split(":")[0] not in ORDINARY_CAPITALS
