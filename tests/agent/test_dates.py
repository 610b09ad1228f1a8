"""Date phrases resolved against the day they were written: what notes and search turn "last Saturday" into."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.dates import DateSpan, day_of, find_dates

MONDAY = dt.date(2023, 5, 8)


def labels(text: str, written: dt.date = MONDAY, **options: bool) -> list[tuple[str, str]]:
    return [(span.phrase, span.label()) for span in find_dates(text, written, **options)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Last Saturday I started a pottery class.", [("Last Saturday", "2023-05-06")]),
        ("yesterday was rough", [("yesterday", "2023-05-07")]),
        ("the day before yesterday", [("the day before yesterday", "2023-05-06")]),
        ("I'll see her next Friday", [("next Friday", "2023-05-12")]),
        ("On Saturday we hiked up the ridge", [("On Saturday", "2023-05-06")]),
        ("On Saturday we will hike up the ridge", [("On Saturday", "2023-05-13")]),
        ("We went to Lisbon in March", [("in March", "2023-03")]),
        ("We are going to Lisbon in March", [("in March", "2024-03")]),
        ("back on 2023-04-01", [("2023-04-01", "2023-04-01")]),
        ("a couple of days ago", [("a couple of days ago", "2023-05-06")]),
        ("in 3 days", [("in 3 days", "2023-05-11")]),
        ("two weeks ago", [("two weeks ago", "2023-04-24..2023-04-30")]),
        ("last weekend", [("last weekend", "2023-05-06..2023-05-07")]),
        ("last month", [("last month", "2023-04")]),
        ("next year", [("next year", "2024")]),
        ("May 2022 was hot", [("May 2022", "2022-05")]),
        ("we met on 14 April", [("14 April", "2023-04-14")]),
        ("I may go, and march is a verb", []),
    ],
)
def test_phrases_become_the_days_they_stand_for(text: str, expected: list[tuple[str, str]]) -> None:
    assert labels(text) == expected


def test_a_query_reads_an_ambiguous_month_as_the_last_one_that_passed() -> None:
    assert labels("what did she do in May?", dt.date(2023, 3, 1), past=True) == [("in May", "2022-05")]
    assert labels("what will we do in May?", dt.date(2023, 3, 1)) == [("in May", "2023-05")]


def test_several_phrases_come_in_text_order_with_their_offsets() -> None:
    text = "Yesterday Ana called; next Friday we fly."
    spans = find_dates(text, MONDAY)
    assert [text[slice(*span.at)] for span in spans] == ["Yesterday", "next Friday"]
    assert spans[0].covers(dt.date(2023, 5, 7)) and not spans[0].covers(MONDAY)


def test_a_message_time_is_its_utc_day() -> None:
    assert day_of(dt.datetime(2023, 5, 8, 23, 59, tzinfo=dt.UTC).timestamp()) == MONDAY


@given(
    st.dates(min_value=dt.date(1990, 1, 1), max_value=dt.date(2090, 12, 31)),
    st.sampled_from(
        [
            "last Saturday",
            "next Tuesday",
            "on Sunday",
            "yesterday",
            "last week",
            "in March",
            "3 months ago",
            "last weekend",
            "this month",
            "next year",
            "the 31st of February",
        ]
    ),
)
def test_every_resolved_span_is_ordered_and_a_past_phrase_never_lands_after_the_day_written(
    written: dt.date, phrase: str
) -> None:
    for span in find_dates(f"It was {phrase}.", written, past=True):
        assert isinstance(span, DateSpan) and span.start <= span.end
        if not phrase.startswith("next"):
            assert span.start <= written


def test_a_plan_can_ask_for_the_day_to_come() -> None:
    written = dt.date(2025, 11, 13)
    assert labels("I'll water her tomatoes on December 2", written) == [("December 2", "2025-12-02")]
    assert labels("Lisbon in June sounds lovely", dt.date(2025, 5, 1), past=False) == [("in June", "2025-06")]
    assert labels("I promised to call on Saturday", MONDAY) == [("on Saturday", "2023-05-13")]


WORDS = st.sampled_from(
    [
        "in",
        "March",
        "march",
        "May",
        "may",
        "12th",
        "of",
        "3",
        "2024",
        "last",
        "next",
        "Saturday",
        "week",
        "ago",
        "two",
        "days",
        "summary",
        "decided",
        "Dec",
        "the",
        "early",
        "June",
        "yesterday",
        ",",
        ".",
        "\n",
        "marching",
    ]
)


@given(st.lists(WORDS, max_size=40), st.dates(min_value=dt.date(2000, 1, 1), max_value=dt.date(2060, 12, 31)))
def test_the_quick_look_for_words_finds_what_a_scan_of_the_whole_text_finds(words: list[str], written: dt.date) -> None:
    """Patterns run only where their words are (a month's pattern only near a month's name): the same phrases as
    running every pattern over the whole text."""
    from unittest import mock

    from agent import dates

    text = " ".join(words)
    everywhere = tuple(("",) for _ in dates._PATTERNS)
    with mock.patch.object(dates, "_TRIGGERS", everywhere):
        scanned = find_dates(text, written)
    assert find_dates(text, written) == scanned
