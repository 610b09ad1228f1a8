"""Fact-bearing sentences: verbatim, classified, scored; routine narration left out."""

import pytest

from agent.compaction.sentences import classify, fact_sentences, normalised


@pytest.mark.parametrize(
    ("sentence", "by_user", "kind"),
    [
        ("From now on always run `just check-all` before you commit anything, ok?", True, "preference"),
        ("Don't touch src/legacy/serializers.py yet.", True, "preference"),
        (
            "We go with SQLite in WAL mode rather than a Postgres sidecar, since the edge boxes have no room.",
            False,
            "decision",
        ),
        ("Beatriz Zhao owns the catalog migration, so ask them first.", False, "fact"),
        ("The sandbox service in dev listens on port 12571, not the default.", False, "fact"),
        ("Committed it as `8093226` on `fix/document-fetch`.", False, "progress"),
        ("For the rest of this project write every timestamp as RFC 3339 with the local offset.", True, "preference"),
        ("We use Redis since it is already deployed everywhere.", False, "decision"),
    ],
)
def test_fact_sentences_are_classified(sentence, by_user, kind):
    classified = classify(sentence, by_user)
    assert classified is not None and classified.kind == kind and classified.text == sentence


@pytest.mark.parametrize(
    "sentence",
    [
        "Checking the logs.",
        "Let me see what changed recently.",
        "ok, go ahead",
        "The cron job is hanging on shutdown since the last deploy, can you check the logs",
    ],
)
def test_routine_narration_is_left_out(sentence):
    assert classify(sentence, False) is None


def test_denser_sentences_score_higher():
    plain = classify("We agreed to use cursor pagination.", False)
    dense = classify("We agreed to use cursor pagination because offset scans took 4 seconds past page 300.", False)
    assert dense.score > plain.score


def test_message_is_split_into_sentences_and_long_ones_are_clipped():
    text = "Checking.\nThe webhook rate limit is 7802 requests per minute in staging. " + "We decided " + "x" * 600
    found = fact_sentences(text, True)
    assert found[0].text == "The webhook rate limit is 7802 requests per minute in staging."
    assert found[1].text.endswith("…") and len(found[1].text) == 320


def test_normalised_key_ignores_numbers_and_case():
    assert normalised("Tests are green now (6 passed).") == normalised("tests are green now (31 passed).")


def test_lines_of_a_fenced_block_are_not_sentences():
    text = (
        "I get this when I trigger the refunds by hand:\n```python\nTraceback (most recent call last):\n"
        "    return RecordService(batched_record=request, limit=4896)\nRefundError: boom\n```\n"
        "Also, the refunds timeout is 5209ms in staging."
    )
    assert [s.text for s in fact_sentences(text, True)] == ["Also, the refunds timeout is 5209ms in staging."]
    unclosed = "Here is the config:\n```\nmax_retries: 55 # the limit\n"
    assert fact_sentences(unclosed, True) == ()


@pytest.mark.parametrize(
    ("sentence", "kind"),
    [
        ("btw, house rule: keep functions under 35 lines, split anything longer.", "preference"),
        ("Remember: deploys to prod only after the 10:00 UTC freeze lifts.", "preference"),
        ("fyi the refund warmup code moved to src/app/refund/warmup.py last sprint, ignore the old module", "fact"),
        ("heads up: the billing cron lives in deploy/cron/billing.yaml now", "fact"),
    ],
)
def test_standing_rules_and_stated_facts_are_kept(sentence, kind):
    classified = classify(sentence, True)
    assert classified is not None and classified.kind == kind


def test_a_sentence_made_only_of_cue_words_is_not_a_fact():
    assert classify("please remember that", True) is None
    assert classify("ok, keep in mind", True) is None


def test_work_the_assistant_reports_is_progress():
    assert classify("I opened PR #4692 with the ledger warmup change.", False).kind == "progress"
    assert (
        classify('Committed it as `83273e4` on `main`: "fix(ledger): rework the ledger cutoff".', False).kind
        == "progress"
    )
