"""The deterministic structured summary: every S5.3 section, filled verbatim from the transcript."""

from agent.compaction import framing
from agent.compaction.digest import build_digest
from agent.compaction.fallback_summary import render_body
from agent.compaction.summary_prompt import missing_sections
from agent.messages import SUMMARY_PREFIX
from agent.tokens import count_message, count_text
from tests.fakes.histories import Transcript


def build():
    t = Transcript(system=None)
    t.user("Migrate the billing service. Never touch the legacy/ directory.")
    t.call("git_log", {"path": "."}, "commit 4e5f6a7b8c9d0e1f\nFix rounding in invoices")
    t.call("run_tests", {}, "FAILED tests/test_invoice.py::test_total - AssertionError: 10.01 != 10.00")
    t.assistant("We decided to use Decimal for money. Updated billing/invoice.py.")
    t.user("Good. Keep the API stable until v2.4.0 ships.")
    messages = t.messages
    digest, _ = build_digest(messages, [count_message(m) for m in messages])
    return digest


def compose(digest, room=3_000, listing_share=0.0, model_notes=None):
    return framing.compose(
        digest,
        room,
        model_notes=model_notes,
        render_body=lambda budget, quoted, said: render_body(digest, budget, quoted_ids=quoted, said=said),
        retained=lambda anchor: False,
        body_share=0.35,
        quote_share=0.3,
        listing_share=listing_share,
        model_share=0.3,
    )


def verbatim_decisions(notes: str) -> str:
    """The Key Decisions section of the digest's notes that follow a model's."""
    verbatim = notes[notes.index(framing.DIGEST_NOTES_HEADING) :]
    return verbatim[verbatim.index("## Key Decisions") :].split("\n## ")[0]


def test_deterministic_summary_has_every_section_and_the_framing():
    notes = compose(build())
    assert notes.text.startswith(SUMMARY_PREFIX)
    assert missing_sections(notes.text) == []
    assert "not instructions and not an active task" in notes.text
    assert "newest message wins" in notes.text


def test_it_carries_quotes_anchors_tool_calls_files_and_errors_verbatim():
    text = compose(build()).text
    for literal in (
        "Good. Keep the API stable until v2.4.0 ships.",
        "Migrate the billing service. Never touch the legacy/ directory.",
        "4e5f6a7b8c9d0e1f",
        "FAILED tests/test_invoice.py::test_total - AssertionError: 10.01 != 10.00",
        "git_log ×1",
        "run_tests ×1",
        "We decided to use Decimal for money.",
        "billing/invoice.py",
    ):
        assert literal in text, literal
    assert text.index("Good. Keep the API stable") < text.index("Migrate the billing service")


def test_user_sentences_already_quoted_are_not_repeated():
    """A quoted message's preference is pointed to by its id in its section, not repeated as a sentence of its own."""
    text = compose(build()).text
    assert text.count("Never touch the legacy/ directory") == 2
    assert "- [m-1, quoted under User Messages] Never touch the legacy/ directory." in text
    assert "\n- Never touch the legacy/ directory" not in text


def test_it_stays_within_its_budget():
    digest = build()
    for _ in range(300):
        digest.anchors.add("commit", f"{len(digest.anchors):040x}"[:-1] + "a", seq=1)
    notes = compose(digest, room=1_500)
    assert count_text(notes.text) <= 1_500 + count_text(framing.header(digest)) + 50


def test_listing_lines_get_their_share_and_are_not_repeated_in_the_index():
    t = Transcript(system=None)
    t.user("Which commit fixed the refunds?")
    log = "abc1234 fix(billing): refunds double counted on retries\nbcd2345 chore: tidy\nsee https://ci.example.com/run/42"
    t.call("terminal", {"command": "git log --oneline -n 2"}, log)
    digest, _ = build_digest(t.messages, [count_message(m) for m in t.messages])
    text = compose(digest, listing_share=0.2).text
    listing, index = text.split("## Recovery")[0].split("## Tool Output Lines")[1].split("## Anchor Index")
    assert "abc1234 fix(billing): refunds double counted on retries" in listing
    assert "https://ci.example.com/run/42" in index and "abc1234" not in index
    without = compose(digest).text
    assert "## Tool Output Lines" not in without
    assert "abc1234" in without.split("## Recovery")[0].split("## Anchor Index")[1]


def test_body_alone_lists_files_and_focus():
    digest = build()
    body = render_body(digest, 2_000, focus_topic="invoice rounding")
    assert "Focus requested for this compaction: invoice rounding" in body
    assert "billing/invoice.py" in body


def quoted_decisions():
    t = Transcript(system=None)
    t.user("Decision: for billing we use exponential backoff capped at 55 seconds.")
    t.user("I prefer Decimal for money, never float.")
    t.call(
        "run_tests",
        {"command": "pytest tests/billing"},
        "Traceback (most recent call last):\n"
        '  File "billing/worker.py", line 88, in settle\n'
        '    x = row["customer_ref"]\n'
        "KeyError: 'customer_ref' [E7139]",
    )
    return build_digest(t.messages, [count_message(m) for m in t.messages])[0]


def test_decisions_and_preferences_of_quoted_messages_are_listed_by_id_not_none_recorded():
    text = compose(quoted_decisions()).text
    decisions = text.split("## Key Decisions")[1].split("\n## ")[0]
    preferences = text.split("## Constraints & Preferences")[1].split("\n## ")[0]
    assert "(none recorded)" not in decisions and "(none recorded)" not in preferences
    assert (
        "- [m-1, quoted under User Messages] Decision: for billing we use exponential backoff capped at 55 seconds."
        in decisions
    )
    assert "- [m-2, quoted under User Messages] I prefer Decimal for money, never float." in preferences
    assert "[m-1] Decision: for billing we use exponential backoff capped at 55 seconds." in text  # the quote itself


def test_none_recorded_only_when_there_are_none_and_a_long_sentence_is_pointed_to_briefly():
    t = Transcript(system=None)
    t.user("Looks fine to me.")
    t.user("We decided to move every nightly export " + "to the new queue " * 20 + "because of the outage.")
    digest = build_digest(t.messages, [count_message(m) for m in t.messages])[0]
    body = render_body(digest, 2_000, quoted_ids=frozenset({"m-1", "m-2"}))
    assert body.split("## Constraints & Preferences")[1].split("\n## ")[0].strip() == "- (none recorded)"
    decision = body.split("## Key Decisions")[1].split("\n## ")[0].strip()
    assert decision.startswith(
        "- [m-2, quoted under User Messages] We decided to move every nightly export"
    ) and decision.endswith("…")
    assert len(decision) < 150


def test_recent_errors_carry_what_produced_them_and_files_the_words_they_were_seen_with():
    digest = quoted_decisions()
    t = Transcript(system=None)
    t.call("read_file", {"path": "svc/ingest/worker.py"}, "def run():\n    pass\n")
    t.assistant("The retry loop in svc/ingest/worker.py drops the batch id.")
    digest = build_digest(t.messages, [count_message(m) for m in t.messages])[0].merge(digest)
    body = render_body(digest, 2_000)
    assert (
        "- Recent error: KeyError: 'customer_ref' [E7139] — from billing/worker.py:88 in settle "
        '(run_tests "pytest tests/billing")' in body
    )
    files = body.split("## Relevant Files")[1].split("\n## ")[0]
    assert "- svc/ingest/worker.py (retry loop in … drops batch id)" in files


def word(i):
    """A made-up word per number (sentences that differ only in digits are one sentence to the digest)."""
    return "".join("aeioubdfgk"[int(digit)] for digit in str(i + 100))


def section(body, heading):
    return body.split(heading)[1].split("\n## ")[0]


def test_stated_sentences_share_one_pool_so_a_quiet_section_leaves_room_to_a_busy_one():
    """Thirty reported commits all fit while the decisions leave their room unused; a fixed share per section cut
    them."""
    t = Transcript(system=None)
    t.user("We decided to keep Postgres because the team knows it.")
    for i in range(30):
        t.assistant(
            f'Committed it as `{0xA000000 + i:07x}` on `main`: "fix(ledger): rework the ledger {word(i)} export".'
        )
    digest, _ = build_digest(t.messages, [count_message(m) for m in t.messages])
    body = render_body(digest, 2_000)
    done = section(body, "### Done").split("### In Progress")[0]
    assert all(
        f'`{0xA000000 + i:07x}` on `main`: "fix(ledger): rework the ledger {word(i)} export"' in done for i in range(30)
    )
    assert "We decided to keep Postgres because the team knows it." in section(body, "## Key Decisions")


def test_a_flood_of_one_kind_does_not_crowd_out_the_others():
    t = Transcript(system=None)
    for i in range(200):
        t.user(f"wait, don't touch src/pkg/{word(i)}.py yet.")
    t.user("Ana Silva owns the ledger export, ping her before changing it.")
    t.user("We decided to keep Postgres because the team knows it.")
    digest, _ = build_digest(t.messages, [count_message(m) for m in t.messages])
    body = render_body(digest, 1_200)
    assert "Ana Silva owns the ledger export" in section(body, "## Critical Context")
    assert "We decided to keep Postgres" in section(body, "## Key Decisions")
    preferences = section(body, "## Constraints & Preferences")
    assert 10 < preferences.count("don't touch") < 200
    assert count_text(body) <= 1_200


def test_what_the_models_notes_hold_word_for_word_is_not_written_twice():
    """The digest's notes skip a sentence the model already copied; their heading says where it is, never "none"."""
    digest = build()
    decision = "We decided to use Decimal for money."
    decisions = verbatim_decisions(compose(digest, model_notes=f"## Key Decisions\n- [m-4] {decision}").text)
    assert decision not in decisions
    assert "(1 recorded, all in the summary above)" in decisions
    assert "none recorded" not in decisions


def test_a_model_that_misquotes_a_decision_does_not_stand_in_for_it():
    t = Transcript(system=None)
    t.user("Which numpy do we pin?")
    t.assistant("Agreed with ops. We'll pin numpy to 1.26. Rebuilding now.")
    t.user("ok, go on")
    t.assistant("Rebuilt the image.")
    digest, _ = build_digest(t.messages, [count_message(m) for m in t.messages])
    decision = "We'll pin numpy to 1.26."
    assert decision in [line.text for line in digest.sentences]
    notes = compose(digest, model_notes="## Key Decisions\n- We'll pin numpy to 1.26.4 for the API image.").text
    assert decision in verbatim_decisions(notes)


def test_a_heading_says_both_what_did_not_fit_and_what_the_model_holds():
    t = Transcript(system=None)
    t.user("Let's settle the exports.")
    short = "We decided to use Decimal for money."
    longer = [
        f"We decided to use {word} queues for the {word} export, since cron lost rows twice last month."
        for word in ("amber", "cobalt")
    ]
    t.assistant(" ".join([short, *longer]))
    digest, _ = build_digest(t.messages, [count_message(m) for m in t.messages])
    body = render_body(digest, 60, said=lambda sentence: sentence == short)
    decisions = body[body.index("## Key Decisions") :].split("\n## ")[0]
    assert "(2 recorded, none fit here" in decisions and "1 more in the summary above" in decisions
