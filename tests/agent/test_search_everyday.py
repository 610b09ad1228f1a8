"""session_search on generated everyday conversations (months of a person's life told with relative dates): a
question about an event finds the turn that answers it, a question asked in the chat comes back with its answer
beside it, and "what did she do last Saturday?" is read against the day it is asked on."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import pytest

from agent.search import DEFAULT_HITS, SearchHit, search_messages
from tests.fakes.everyday import Conversation, Question, conversation

SEEDS = (1, 2, 3)


@pytest.fixture(scope="module", params=SEEDS)
def chat(request: pytest.FixtureRequest) -> Conversation:
    return conversation(request.param)


def asked(chat: Conversation, question: Question) -> list[SearchHit]:
    """The hits the tool's default search gives for the question, asked on its day when it has one."""
    now = dt.date.fromisoformat(question.asked_on) if question.asked_on else None
    return search_messages(chat.messages, question.question, now=now)


def found(hits: Sequence[SearchHit], question: Question, *, beside: bool = False) -> bool:
    ids = {str(hit.message_id) for hit in hits}
    if beside:
        ids |= {turn.id for hit in hits for turn in (hit.before, hit.after) if turn is not None}
    return bool(ids & set(question.answer_ids))


def of_kind(chat: Conversation, kind: str) -> list[Question]:
    questions = [question for question in chat.questions if question.kind == kind]
    assert questions, kind
    return questions


def test_a_question_about_an_event_finds_the_turn_that_answers_it(chat: Conversation) -> None:
    events = of_kind(chat, "event-date")
    hits = [found(asked(chat, question)[:DEFAULT_HITS], question) for question in events]
    assert sum(hits) >= 0.9 * len(events), [q.question for q, hit in zip(events, hits) if not hit]


def test_a_date_relative_question_is_read_against_the_day_it_is_asked_on(chat: Conversation) -> None:
    for question in of_kind(chat, "date-relative"):
        hits = asked(chat, question)
        assert found(hits, question), question.question
        answer = next(hit for hit in hits if str(hit.message_id) in question.answer_ids)
        assert hits.index(answer) < 3, question.question


def test_a_question_asked_in_the_chat_comes_back_with_its_answer_beside_it(chat: Conversation) -> None:
    for question in of_kind(chat, "in-chat"):
        assert found(asked(chat, question), question, beside=True), question.question
