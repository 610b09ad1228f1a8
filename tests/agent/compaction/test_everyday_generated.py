"""Generated months of a narrator's life, compacted at small windows: the deterministic notes keep who is who and
what happened when.

At an 8K window the summary has about 400 tokens for everything. A chat between people has no tool work, so the
notes must spend that room on the people in it (with their relations) and its dated events, not on small talk,
the assistant's last words or sentences that only look like decisions. The ground truth comes from the generator:
its fact questions name the sister, partner, coach and dog, its event questions carry the true ISO day.
"""

import asyncio
import copy

import pytest

from agent.context_compressor import ContextCompressor
from agent.messages import is_summary
from agent.settings import CompressionSettings
from tests.fakes.everyday import Conversation, conversation

SEEDS = (1, 2, 3, 4)
#: The relation words a line may name each person by (a dog is often introduced as a puppy).
RELATIONS = {"sister": ("sister",), "partner": ("partner",), "coach": ("coach",), "dog": ("dog", "puppy")}


def summary_at(convo: Conversation, window: int) -> str:
    engine = ContextCompressor(model="m", context_length=window, settings=CompressionSettings())
    working = [{"role": "system", "content": "You are a friend.", "_id": "system"}, *copy.deepcopy(convo.messages)]
    result = asyncio.run(engine.compress(working, force=True))
    (summary,) = [message for message in result if is_summary(message)]
    return str(summary["content"])


def cast(convo: Conversation) -> dict[str, str]:
    """``relation -> name`` from the fact questions: the sister and partner are their facts' subjects, the coach
    and the dog their answers."""
    names = {}
    for question in convo.questions:
        if question.kind != "fact":
            continue
        (fact,) = question.facts
        if "sister" in fact.subject or "partner" in fact.subject:
            relation = "sister" if "sister" in fact.subject else "partner"
            names[relation] = next(word for word in fact.subject if word != relation)
        elif "coach" in question.question or "dog" in question.question:
            names["coach" if "coach" in question.question else "dog"] = fact.answers[0]
    assert set(names) == set(RELATIONS)
    return names


def people_named(convo: Conversation, summary: str) -> set[str]:
    """The relations whose person is named on a line that also says the relation."""
    lines = summary.lower().splitlines()
    return {
        relation
        for relation, name in cast(convo).items()
        if any(name.lower() in line and any(word in line for word in RELATIONS[relation]) for line in lines)
    }


def dated_events(convo: Conversation, summary: str) -> set[str]:
    """The event questions whose true ISO day stands on a line with the event's words."""
    found = set()
    for question in convo.questions:
        if question.kind != "event-date" or question.date is None:
            continue
        (fact,) = question.facts
        lines = summary.lower().splitlines()
        if any(question.date in line and any(word.lower() in line for word in fact.subject) for line in lines):
            found.add(question.question)
    return found


@pytest.fixture(scope="module")
def summaries() -> dict[tuple[int, int], tuple[Conversation, str]]:
    out = {}
    for seed in SEEDS:
        convo = conversation(seed)
        for window in (8_000, 16_000):
            out[seed, window] = convo, summary_at(convo, window)
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_at_8k_the_notes_name_the_people_with_their_relations_and_dated_events(summaries, seed):
    convo, summary = summaries[seed, 8_000]
    assert len(people_named(convo, summary)) >= 3, summary
    assert len(dated_events(convo, summary)) >= 4, summary


@pytest.mark.parametrize("seed", SEEDS)
def test_at_16k_the_notes_hold_more_people_and_events(summaries, seed):
    convo, small = summaries[seed, 8_000]
    _, big = summaries[seed, 16_000]
    assert len(people_named(convo, big)) == len(RELATIONS), big
    assert len(dated_events(convo, big)) >= 5, big
    assert len(dated_events(convo, big)) > len(dated_events(convo, small))


@pytest.mark.parametrize("seed", SEEDS)
def test_small_talk_and_chat_reasons_take_no_room(summaries, seed):
    _, summary = summaries[seed, 8_000]
    assert "Earliest compacted request" not in summary
    assert "At the cut the assistant had last written" not in summary
    assert "none fit here" not in summary
    assert "People and handles" not in summary
