"""What a fold says about the people who wrote it: each person's own standing statements become entries in their
memory, and nothing else does (not the assistant's words, not what someone says of another person, not a mood)."""

import datetime as dt
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.compaction.memory_notes import MAX_NOTE_CHARS, MemoryNote, memory_notes

DAY = dt.datetime(2026, 1, 16, 12, tzinfo=dt.UTC).timestamp()


def said(text, *, user="tg:42", ident="m-1", ts=DAY, role="user", **extra):
    message = {"role": role, "content": text, "_id": ident, "_ts": ts, **extra}
    if user is not None:
        message["_user"] = user
    return message


POSITIVES = [
    # preferences
    "I prefer short answers.",
    "I like jazz a lot.",
    "I love hiking in the mountains.",
    "I hate cilantro.",
    "I'd rather have tea than coffee.",
    "I can't stand cilantro.",
    "My favourite band is Radiohead.",
    "Nothing beats jazz for me.",
    "For me, nothing beats long walks.",
    # constraints
    "I'm allergic to peanuts.",
    "I’m vegetarian.",
    "I'm vegan",
    "I don't eat pork.",
    "I can't eat gluten.",
    "I only drink decaf these days.",
    "I'm not allowed to drink alcohol.",
    "I have a bad allergy to kiwi, so keep that in mind.",
    "I have a peanut allergy.",
    "I've got a nut allergy.",
    # facts about themselves
    "My name is Dee.",
    "Call me Dee.",
    "I'm Dee.",
    "Everyone calls me Dee, by the way.",
    "Folks call me Bex.",
    "I live in Leeds.",
    "I moved to Lisbon last year.",
    "We relocated to Porto over the summer.",
    "We've moved to Cork.",
    "I work as a nurse.",
    "I'm a software engineer.",
    "I've been a nurse for ten years now.",
    "My birthday is March 3.",
    "I have two kids.",
    "I've got two kids.",
    "My partner is called Sam.",
    "My sister is Ana.",
    "My dog is named Biscuit.",
    "I have a puppy called Ziggy.",
    "I'm 34.",
    # standing instructions
    "Always answer in metric units.",
    "Never use emojis with me.",
    "Please don't use jargon.",
    "From now on, reply in Spanish.",
    "I'd like you to always answer in metric units.",
    "I'd prefer you to never use emojis with me.",
    "Could you always answer in metric?",
    "Remember that I'm vegetarian.",
    "Keep in mind I'm on a tight budget.",
    "Don't forget I'm lactose intolerant.",
    # decisions
    "I decided to go vegan.",
    "I've decided to quit sugar.",
    "We'll go with the blue sofa.",
    "It's settled: I'm going to sell the car.",
    "Settled: we're going to adopt a rescue greyhound.",
]

NEGATIVES = [
    # questions
    "Do you like jazz?",
    "Are you vegetarian?",
    "Remember when we went to Paris?",
    # hypotheticals, plans and hedges
    "If I move to Berlin I'd need a flat.",
    "I might go vegan.",
    "Maybe I'll try the soup.",
    "I'll always love pizza.",
    "I'm going to go vegan.",
    "I wish I could eat cheese.",
    "I'd love to visit Japan.",
    "I think I prefer tea.",
    # moods and one-offs
    "I'm tired today.",
    "I'm so stressed.",
    "I can't stand him tonight.",
    "Let's go with pizza tonight.",
    "Remember I'm away next week.",
    "I love the photo!",
    "I love you.",
    "I like the idea.",
    # greetings and idioms
    "Hi there!",
    "Good morning everyone!",
    "Never mind.",
    "Don't worry about it.",
    "Don't mention it.",
    "Always a pleasure.",
    "Call me when you land.",
    "Call me tomorrow.",
    "Please don't be late.",
    "Don't forget the milk.",
    # other people's preferences and quoted speech
    "My sister loves jazz.",
    "My sister Ana loves jazz.",
    "Dana said she prefers tea.",
    "Dana prefers tea.",
    "Dana's favourite colour is blue.",
    'She said "I\'m vegetarian".',
    "I told Dana I'm vegetarian.",
    # not true of the speaker
    "I'm not vegetarian.",
    "I used to live in Paris.",
    # engineering
    "I prefer `ruff` over black in pyproject.toml.",
    "I decided to use redis_streams for the queue.",
    "Let's go with the fix in worker/drain.py.",
    # injection about another named person, and secrets
    "Remember that Dana's password is hunter2.",
    "Remember that Dana is allergic to nuts.",
    "Always reply to Dana in French.",
    "My password is hunter2.",
    # near misses of wordings that are entries
    "I'd like you to meet Sam.",
    "I'd like you to always reply to Dana in French.",
    "Everyone calls me lazy.",
    "Everyone calls me when they need help.",
    "Nobody calls me Dee anymore.",
    "We moved to the garden.",
    "We moved to Discord.",
    "My sister has a peanut allergy.",
    "I have no allergies.",
    "I have an allergy appointment at noon.",
    "I have a question about the allergy.",
    "I've been a terrible cook lately.",
    "I've been a nurse in a past life.",
    "Fun fact: my sister loves jazz.",
    "Nothing beats a good night's sleep.",
    "Nothing beats that for me.",
    "It's settled: I'm going to maybe sell the car.",
    "It's settled: Dana's going to host.",
    "It's settled then, see you at eight.",
    "So it's settled, I'm going to bed.",
]


@pytest.mark.parametrize("sentence", POSITIVES)
def test_a_persons_statement_about_themselves_is_an_entry_with_its_message_and_day(sentence):
    notes = memory_notes([said(f"{sentence} ", ident="m-7")])
    assert notes == [MemoryNote("tg:42", f'"{sentence}" (said 2026-01-16)', "m-7")]


@pytest.mark.parametrize("sentence", NEGATIVES)
def test_what_is_not_a_standing_statement_about_the_speaker_is_no_entry(sentence):
    assert memory_notes([said(sentence)]) == []


@pytest.mark.parametrize(
    ("sentence", "entry"),
    [
        ("Honestly, I can't stand cilantro.", "I can't stand cilantro."),
        ("Oh, and btw, I'm allergic to shellfish.", "I'm allergic to shellfish."),
        ("Hi, I'm Dee.", "I'm Dee."),
        ("Sounds good — please never use emojis with me.", "please never use emojis with me."),
        ("Fun fact: I work as a nurse at the hospital.", "I work as a nurse at the hospital."),
        ("To be clear, I'm allergic to peanuts.", "I'm allergic to peanuts."),
    ],
)
def test_small_talk_before_a_statement_is_left_out_of_its_entry(sentence, entry):
    assert [note.text for note in memory_notes([said(sentence)])] == [f'"{entry}" (said 2026-01-16)']


#: Statements typed the way people chat (lower case, "im", emoji, "pls", a greeting or a pause first, the statement
#: mid-message), and the entry each gives: what the person wrote, from where the statement starts.
TYPED = [
    ("im vegan tbh \U0001f331", "im vegan tbh \U0001f331"),
    ("hey!! u can call me Tash btw \U0001f60a", "u can call me Tash btw \U0001f60a"),
    ("the name's Rory", "the name's Rory"),
    ("Bo is what my friends call me", "Bo is what my friends call me"),
    ("i'd rather you called me Max, if that's ok", "i'd rather you called me Max, if that's ok"),
    ("Hey, before I forget \u2014 I'd rather you called me Bex.", "I'd rather you called me Bex."),
    ("i cant eat gluten, coeliac", "i cant eat gluten, coeliac"),
    ("Sesame allergy here \U0001f64b", "Sesame allergy here \U0001f64b"),
    ("dairy makes me really ill", "dairy makes me really ill"),
    (
        "Good morning \U0001f31e i'm deathly allergic to kiwi just so ur aware",
        "i'm deathly allergic to kiwi just so ur aware",
    ),
    ("Sorry to be a pain, but I can't go near cats \u2014 allergy.", "I can't go near cats \u2014 allergy."),
    ("I've been vegetarian for ten years", "I've been vegetarian for ten years"),
    ("we live in Porto now \U0001f3e1", "we live in Porto now \U0001f3e1"),
    ("home's Galway these days", "home's Galway these days"),
    ("Quick update \u2014 we finally made the move to Oslo.", "we finally made the move to Oslo."),
    ("I've just started a new job as a paramedic \U0001f64c", "I've just started a new job as a paramedic \U0001f64c"),
    ("i earn my living as a plumber", "i earn my living as a plumber"),
    ("By day I'm a librarian, by night a gamer", "By day I'm a librarian, by night a gamer"),
    ("Tom's my husband \U0001f60d", "Tom's my husband \U0001f60d"),
    ("my bday is May 4 \U0001f382", "my bday is May 4 \U0001f382"),
    ("i'm a June baby", "i'm a June baby"),
    ("I'm obsessed with sea swimming lol", "I'm obsessed with sea swimming lol"),
    ("I'd pick trains over planes any day", "I'd pick trains over planes any day"),
    ("Honestly the older I get the more I like jazz.", "the older I get the more I like jazz."),
    ("cant be doing with reality tv", "cant be doing with reality tv"),
    ("I've got no time for golf, sorry", "I've got no time for golf, sorry"),
    ("pls reply in French from now on", "pls reply in French from now on"),
    ("keep ur answers short pls", "keep ur answers short pls"),
    ("can you answer me in metric units from now on?", "can you answer me in metric units from now on?"),
    (
        "Hiya \u2014 small favour: could you stick to replying in plain text?",
        "could you stick to replying in plain text?",
    ),
    ("Respond in Spanish please, it's easier for me.", "Respond in Spanish please, it's easier for me."),
    ("Default to writing to me without emojis.", "Default to writing to me without emojis."),
    ("im gonna learn Welsh, decided last night", "im gonna learn Welsh, decided last night"),
    ("We've made up our minds to move to the coast", "We've made up our minds to move to the coast"),
    ("My mind's made up, I'll quit the choir.", "My mind's made up, I'll quit the choir."),
    ("i'm definitely going to run a marathon this year", "i'm definitely going to run a marathon this year"),
    (
        "So after months of dithering I've decided I'm going to sell the flat, wish me luck.",
        "after months of dithering I've decided I'm going to sell the flat, wish me luck.",
    ),
]

#: Near misses of the typed wordings: each is someone else's, a reaction or mood of the moment, a one-off request,
#: a forecast or an errand, or said under someone else's words; none is an entry.
NEAR_MISSES = [
    "i'm obsessed with this song right now",  # a mood of the moment, and a reaction to "this"
    "I'm obsessed with this song",
    "i'm mad about the delay",  # angry, not fond
    "I'm not into it",
    "I've never liked him",
    "I've got no time for this",
    "can't be doing with this",
    "I'd pick that any day",
    "Give me a minute",
    "my sister's birthday is March 3",
    "March 3 is my sister's birthday",
    "It's my birthday today!",
    "I'm a big baby",
    "reply to Sam please",
    "Reply in the thread please",
    "Reply in Slack please",
    "Answer in French.",  # about the message at hand: nothing makes it standing
    "Write to Sam in French please.",
    "Keep your answers short today.",
    "Keep your answers coming",
    "Could you answer this?",
    "Just call me when you land",
    "pls call me later",
    "Just moved to the garden",
    "Moved to Slack for work",
    "Home is where the heart is",
    "we live in hope",
    "I can't be around him",
    "I can't go near that place",
    "No nut allergy here",
    "ugh i hate mondays",
    "I'm definitely going to regret this",
    "I'm definitely going to be late",
    "Decision made: Dana's going to host",
    "I've decided I'm going to bed",
    "im gonna grab a coffee",
    "We've made up our minds to stay home tonight",
    "My mind's made up, I'll go",
    "Dana said I'm vegan",
    "Dana knows I hate olives",
    "Apparently I'm allergic to kiwi",
    "The doctor says I'm allergic to kiwi",
    "Funny how I hate olives",
    "Not sure I like jazz",
    "Dana asked if I'm vegan",
    "My sister, who I love, is vegan",
    "Dana: I love opera",  # a transcript's line is Dana's, not the speaker's
    "Told you I'm vegan",
    "my brother's allergic to kiwi lol",
    "our neighbour's a nurse and hates opera",
    "Would I like opera, you reckon?",
]


@pytest.mark.parametrize(("message", "entry"), TYPED)
def test_a_statement_typed_the_way_people_chat_is_an_entry_from_where_it_starts(message, entry):
    assert [note.text for note in memory_notes([said(message)])] == [f'"{entry}" (said 2026-01-16)']


@pytest.mark.parametrize("sentence", NEAR_MISSES)
def test_near_misses_of_chat_wordings_are_no_entry(sentence):
    assert memory_notes([said(sentence)]) == []


@pytest.mark.parametrize(
    "message",
    [
        said("I'm vegetarian.", role="assistant", user=None),
        said("I'm vegetarian.", role="assistant"),
        said("I'm vegetarian.", role="tool", user=None, tool_call_id="c1"),
        said("I'm vegetarian.", _compressed_summary=True, _synthetic=True),
        said("I'm vegetarian.", _synthetic=True),
        said("I'm vegetarian.", user=None),
        said("I'm vegetarian.", user=""),
        said("> I'm vegetarian.\nha, same here"),
        said("Ha. > i live in Cork now\nwho wrote this?"),
        said("```\nI'm vegetarian.\n```"),
    ],
    ids=[
        *("assistant", "assistant-with-user", "tool", "summary", "synthetic", "no-user", "empty-user", "quoted"),
        *("quoted-mid-line", "code"),
    ],
)
def test_only_a_persons_own_words_yield_entries(message):
    assert memory_notes([message]) == []


def test_content_parts_are_read_and_a_message_without_a_day_or_id_still_counts():
    message = {"role": "user", "_user": "dc:7", "content": [{"type": "text", "text": "Hello! I'm vegan."}]}
    assert memory_notes([message]) == [MemoryNote("dc:7", '"I\'m vegan."', "")]


def test_a_long_sentence_is_cut_at_a_word_to_fit():
    sentence = "I'm allergic to " + ", ".join(["peanuts", "walnuts", "almonds", "cashews", "pecans"] * 12) + "."
    (note,) = memory_notes([said(sentence)])
    assert len(note.text) <= MAX_NOTE_CHARS
    assert note.text.startswith("\"I'm allergic to peanuts, walnuts")
    assert note.text.endswith('…" (said 2026-01-16)')
    body = note.text[1:].split("…")[0]
    assert sentence.startswith(body) and sentence[len(body)] in " ,"


def test_each_entry_belongs_to_whoever_said_it_in_a_group():
    fold = [
        said("Lee here. I'm vegetarian, by the way.", user="tg:1", ident="a", _from="Lee"),
        said("Nice! I can't stand mushrooms.", user="tg:2", ident="b", _from="Dana"),
        said("Dana hates mushrooms, remember that.", user="tg:1", ident="c", _from="Lee"),
        said("Noted: Lee is vegetarian and Dana hates mushrooms.", role="assistant", user=None, ident="d"),
    ]
    assert memory_notes(fold) == [
        MemoryNote("tg:1", '"I\'m vegetarian, by the way." (said 2026-01-16)', "a"),
        MemoryNote("tg:2", '"I can\'t stand mushrooms." (said 2026-01-16)', "b"),
    ]


def test_the_same_sentence_is_one_entry_from_its_newest_saying():
    later = DAY + 3 * 86_400
    fold = [
        said("I'm vegetarian.", ident="m-1"),
        said("I’m  vegetarian", ident="m-2", ts=later),
        said("I'm vegetarian.", user="tg:9", ident="m-3"),
    ]
    assert memory_notes(fold) == [
        MemoryNote("tg:42", '"I’m vegetarian" (said 2026-01-19)', "m-2"),
        MemoryNote("tg:9", '"I\'m vegetarian." (said 2026-01-16)', "m-3"),
    ]


def test_each_person_keeps_at_most_the_limit_firmest_first():
    likes = [said(f"I like band number {n}.", ident=f"like-{n}") for n in range(30)]
    fold = [*likes, said("I'm allergic to peanuts.", ident="allergy"), said("Call me Dee.", ident="name")]
    notes = memory_notes(fold)
    assert len(notes) == 20
    assert [note.message_id for note in notes[:3]] == ["name", "allergy", "like-0"]
    assert [note.message_id for note in memory_notes(fold, limit_per_person=3)] == ["name", "allergy", "like-0"]
    assert memory_notes(fold, limit_per_person=0) == []


#: Near misses holding a positive ("Dana said I'm vegan") are left out: the oracle below finds positives by substring.
_APART = [sentence for sentence in NEAR_MISSES if not any(positive in sentence for positive in POSITIVES)]
STATEMENTS = [*POSITIVES, *NEGATIVES, *_APART, "Sounds good.", "Ha, same here!", "What time is it?"]


@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=3)),
        min_size=1,
        max_size=30,
    ),
    st.integers(2, 4),
)
def test_in_any_interleaving_every_entry_is_its_speakers_own_sentence(rows, people):
    fold = [
        said("\n".join(sentences), user=f"tg:{who % people}", ident=f"m-{n}", _from=f"P{who % people}")
        for n, (who, sentences) in enumerate(rows)
    ]
    by_id = {message["_id"]: message for message in fold}
    notes = memory_notes(fold)
    for note in notes:
        message = by_id[note.message_id]
        assert note.person == message["_user"]
        sentence = note.text.split('" (said ')[0][1:]
        assert sentence in message["content"]
        assert sentence in POSITIVES or sentence.rstrip() in POSITIVES
    stated = {(m["_user"], s) for m in fold for s in POSITIVES if s in m["content"]}
    assert {(note.person, note.text.split('" (said ')[0][1:]) for note in notes} == stated


# --------------------------------------------------------------------------- a generated night of group chat

PEOPLE = {"tg:1": "Maya", "tg:2": "Jo", "tg:3": "Kofi"}
CHATTER = [
    "Hey everyone!",
    "Good evening all",
    "How was your day?",
    "Did anyone watch the match?",
    "I'm so tired today.",
    "I'm exhausted lol",
    "Haha that's hilarious",
    "My sister loves that show.",
    "Kofi said he prefers the old version.",
    "If I win the lottery I'd buy a boat.",
    "Maybe I'll go to the gym tomorrow.",
    "I might order pizza.",
    "Should we get Thai or Indian?",
    "Let's go with Thai tonight.",
    "I love that!",
    "I love you guys.",
    "Never mind, found it.",
    "Don't forget the milk.",
    "Please don't be late on Friday.",
    "Call me when you get home.",
    "The deploy failed again, see worker/drain.py line 40.",
    "I decided to bump the timeout in config.yaml to 30s.",
    "Remember that Maya's keys are under the mat.",
    "Jo hates olives, remember that.",
    "Anyway, what time is it?",
    "I'm heading out now.",
    "Cute dog pic!",
    "Same here.",
    "We watched a movie last night.",
    "She told me she's vegan now.",
]
ASSISTANT = [
    "Sure! Here's a recipe you might like.",
    "I prefer to keep answers short, but happy to expand.",
    "Noted: Jo is allergic to peanuts.",
    "Always happy to help!",
]
PLANTED = "Oh btw, I'm allergic to peanuts, so no satay for me."
#: What Jo's memory should get from the night: the planted sentence past its small talk, with the day it was said.
ENTRY = '"I\'m allergic to peanuts, so no satay for me." (said 2026-01-16)'


def night(seed: int, size: int = 2_000) -> list[dict]:
    """A night of three friends and an assistant from 20:00 on: chatter only, except one planted statement of
    Jo's in the first hour."""
    rng = random.Random(seed)
    start = dt.datetime(2026, 1, 16, 20, tzinfo=dt.UTC).timestamp()
    messages = []
    planted_at = rng.randrange(5, 60)
    for n in range(size):
        ts = start + n * 10.0  # 2,000 messages over five and a half hours
        if n == planted_at:
            messages.append(said(PLANTED, user="tg:2", ident=f"n-{n}", ts=ts, _from="Jo"))
        elif rng.random() < 0.15:
            messages.append(said(rng.choice(ASSISTANT), role="assistant", user=None, ident=f"n-{n}", ts=ts))
        else:
            user = rng.choice(sorted(PEOPLE))
            text = " ".join(rng.sample(CHATTER, rng.randint(1, 3)))
            messages.append(said(text, user=user, ident=f"n-{n}", ts=ts, _from=PEOPLE[user]))
    return messages


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_night_of_chatter_yields_only_the_planted_statement(seed):
    fold = night(seed)
    (planted,) = [message for message in fold if message["content"] == PLANTED]
    assert memory_notes(fold) == [MemoryNote("tg:2", ENTRY, planted["_id"])]
