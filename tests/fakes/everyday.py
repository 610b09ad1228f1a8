"""Long everyday conversations with a ground truth of what a reader may later ask about them.

foldgate's compaction and search were tuned on engineering logs (SHAs, paths, error codes). A
personal chat is different: people, relations, pets, places, likes and feelings, and events told
with dates relative to the day they were told ("last Saturday", "yesterday", "next Friday"). This
module writes such chats from one seeded :class:`random.Random` (same seed, same conversation;
nothing is downloaded) as foldgate messages, months of sessions days apart.

Shape of a conversation (:func:`conversation`):

* ``{"role", "content", "_id": str(n), "_ts": unix seconds, "_from": name}``. One narrator tells
  their life. In the ``friends`` style the other speaker is a friend: the narrator is always
  role ``user`` and the friend role ``assistant``, both named by ``_from``; in the ``assistant``
  style the narrator talks to an assistant (role ``assistant``, ``_from`` "assistant"). Roles
  alternate strictly and every session opens with the narrator.
* Sessions are 2–9 days apart, in the evening on weekdays and in the daytime at weekends, a
  turn every 20 s – 4 min.
* Each told event keeps its true ISO date (``Question.date``); the turn says it relatively.

The ground truth (:attr:`Conversation.questions`) is a list of questions asked after the chat,
each with the ids of the turn(s) that answer it (never the turn that asked) and the facts
(:class:`Fact`) an answer needs. Kinds: ``fact``, ``event-date``, ``date-relative`` (with the
day it is asked on, ``asked_on``), ``paraphrase`` (no content word of the question is in the
answer), ``join`` (two turns needed) and ``in-chat`` (a question asked in the chat; the next
turn answers it).
"""

from __future__ import annotations

import datetime as dt
import random
import re
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.everyday_words import (
    ASSISTANT_REPLIES,
    CHAT_QUESTIONS,
    CITIES,
    DISLIKES,
    DOG_BREEDS,
    DOG_NAMES,
    EVENTS,
    FILLER,
    FRIEND_REPLIES,
    GREETINGS,
    JOBS,
    NAMES,
    PARAPHRASES,
    PLANS,
    SLOTS,
    SPORTS,
    WORKPLACES,
)

TOKENS_MIN, TOKENS_MAX = 20_000, 35_000
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five"}


@dataclass(frozen=True)
class Fact:
    """What an answer must hold: any of ``answers`` literally, and near it (same or next line) one of
    ``subject`` (none: the answer alone will do); ``turn`` is the id of the turn that says it."""

    answers: tuple[str, ...]
    subject: tuple[str, ...]
    turn: str


@dataclass(frozen=True)
class Question:
    kind: str
    question: str
    answer_ids: tuple[str, ...]
    facts: tuple[Fact, ...]
    #: For ``date-relative``: the day the question is asked on (its "last Saturday" is relative to it).
    asked_on: str | None = None
    #: For ``event-date`` and ``date-relative``: the event's true day (ISO).
    date: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "question": self.question,
            "answer_ids": list(self.answer_ids),
            "facts": [{"answers": list(f.answers), "subject": list(f.subject), "turn": f.turn} for f in self.facts],
            "asked_on": self.asked_on,
            "date": self.date,
        }


@dataclass
class Conversation:
    name: str
    style: str
    narrator: str
    other: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    #: (asking turn id, answering turn id) of every question asked inside the chat.
    qa_pairs: list[tuple[str, str]] = field(default_factory=list)


def date_renderings(day: dt.date) -> tuple[str, ...]:
    """Ways a note or a reply may write a day: ``2026-03-07``, ``March 7``, ``7 March``, ``Mar 7``, ``7 Mar``."""
    month, short = day.strftime("%B"), day.strftime("%b")
    return (day.isoformat(), f"{month} {day.day}", f"{day.day} {month}", f"{short} {day.day}", f"{day.day} {short}")


def past_phrase(rng: random.Random, told: dt.date) -> tuple[str, dt.date]:
    """A relative phrase for a recent day before ``told`` and that day; "last <weekday>" only where the day
    lies in the previous calendar week, so no reading of it is ambiguous."""
    options: list[tuple[str, dt.date]] = [("yesterday", told - dt.timedelta(days=1))]
    for back in range(2, 7):
        day = told - dt.timedelta(days=back)
        if day.weekday() > told.weekday():
            options.append((f"last {WEEKDAYS[day.weekday()]}", day))
    back = rng.choice((2, 3, 4, 5))
    options.append((f"{NUMBER_WORDS[back]} days ago", told - dt.timedelta(days=back)))
    back = rng.randrange(6, 13)
    day = told - dt.timedelta(days=back)
    options.append((f"on {day.strftime('%B')} {day.day}", day))
    return rng.choice(options)


def future_phrase(rng: random.Random, told: dt.date) -> tuple[str, dt.date]:
    """A relative phrase for a day after ``told``: tomorrow, "next <weekday>" (always in the next calendar
    week), or an explicit day."""
    options: list[tuple[str, dt.date]] = [("tomorrow", told + dt.timedelta(days=1))]
    for ahead in range(1, 8):
        day = told + dt.timedelta(days=ahead)
        if day.weekday() < told.weekday():
            options.append((f"next {WEEKDAYS[day.weekday()]}", day))
    day = told + dt.timedelta(days=rng.randrange(8, 20))
    options.append((f"on {day.strftime('%B')} {day.day}", day))
    return rng.choice(options)


def asking_phrase(rng: random.Random, day: dt.date) -> tuple[str, dt.date]:
    """How a later question names ``day`` relative to the day it is asked on: (phrase, asked_on)."""
    options = [("yesterday", day + dt.timedelta(days=1))]
    for ahead in range(1, 7):
        asked = day + dt.timedelta(days=ahead)
        if asked.weekday() < day.weekday():
            options.append((f"last {WEEKDAYS[day.weekday()]}", asked))
    return rng.choice(options)


class _Writer:
    """Builds one conversation: turns, their clock, and the no-sentence-twice rule for filler."""

    def __init__(self, rng: random.Random, style: str, narrator: str, other: str, start: dt.datetime) -> None:
        self.rng, self.style, self.narrator, self.other = rng, style, narrator, other
        self.clock = start
        self.messages: list[dict[str, Any]] = []
        self.used: set[str] = set()

    def say(self, text: str, *, narrator: bool) -> str:
        if self.messages and (self.messages[-1]["role"] == "user") == narrator:
            raise AssertionError("roles must alternate")
        self.clock += dt.timedelta(seconds=self.rng.randrange(20, 240))
        ident = str(len(self.messages) + 1)
        self.messages.append(
            {
                "role": "user" if narrator else "assistant",
                "content": text,
                "_id": ident,
                "_ts": float(int(self.clock.timestamp())),
                "_from": self.narrator if narrator else (self.other if self.style == "friends" else "assistant"),
            }
        )
        return ident

    @property
    def today(self) -> dt.date:
        return self.clock.date()

    def fill(self, template: str, **extra: str) -> str:
        """``template`` with its ``{slot}`` words drawn from :data:`SLOTS` (and ``extra``)."""
        values = {key: self.rng.choice(words) for key, words in SLOTS.items()}
        values.update(name=self.narrator, other=self.other, **extra)
        text = template.format(**values)
        return text[0].upper() + text[1:]

    def filler(self, pool: tuple[str, ...], count: int, **extra: str) -> str:
        """``count`` sentences of small talk from different templates, none said before in this conversation."""
        sentences: list[str] = []
        templates: set[str] = set()  # no template twice in one turn
        for _ in range(count):
            for _attempt in range(60):
                template = self.rng.choice(pool)
                sentence = self.fill(template, **extra)
                if sentence not in self.used and template not in templates:
                    break
            self.used.add(sentence)
            templates.add(template)
            sentences.append(sentence)
        return " ".join(sentences)

    def reply(self) -> str:
        return self.filler(ASSISTANT_REPLIES if self.style == "assistant" else FRIEND_REPLIES, self.rng.randint(1, 2))

    def chat(self, pairs: int) -> None:
        """``pairs`` exchanges of small talk (narrator, then the other)."""
        for _ in range(pairs):
            self.say(self.filler(FILLER, self.rng.randint(1, 3)), narrator=True)
            self.say(self.reply(), narrator=False)

    def next_session(self) -> None:
        day = self.clock.date() + dt.timedelta(days=self.rng.randint(2, 9))
        hour = self.rng.randint(10, 16) if day.weekday() >= 5 else self.rng.randint(18, 21)
        self.clock = dt.datetime(day.year, day.month, day.day, hour, self.rng.randrange(60), tzinfo=dt.UTC)


@dataclass
class _Cast:
    """The people and animals of one narrator's life."""

    sister: str
    partner: str
    coach: str
    dog: str
    breed: str
    sport: str
    sister_city: str
    partner_job: str
    sister_work: str
    dislike: str

    @classmethod
    def draw(cls, rng: random.Random, taken: set[str]) -> _Cast:
        sister, partner, coach = rng.sample([name for name in NAMES if name not in taken], 3)
        return cls(
            sister,
            partner,
            coach,
            dog=rng.choice(DOG_NAMES),
            breed=rng.choice(DOG_BREEDS),
            sport=rng.choice(SPORTS),
            sister_city=rng.choice(CITIES),
            partner_job=rng.choice(JOBS),
            sister_work=rng.choice(WORKPLACES),
            dislike=rng.choice(DISLIKES),
        )


def _ask(kind: str, question: str, answer: str, subject: tuple[str, ...]) -> Question:
    """A question whose one fact's turn is filled in once the fact is told."""
    return Question(kind, question, (), (Fact((answer,), subject, ""),))


def _introductions(cast: _Cast, name: str) -> list[tuple[str, str, tuple[Question, ...]]]:
    """(turn text, key, questions) for the people and animals; each is told once, in its own session."""
    c = cast
    return [
        (
            f"Big news: we finally got a dog! A {c.breed} puppy called {c.dog}, and she already owns the sofa.",
            "dog",
            (_ask("fact", f"What is the name of {name}'s dog?", c.dog, ("dog", c.breed)),),
        ),
        (
            f"My sister {c.sister} rang, she's settled in {c.sister_city} now and loves the flat.",
            "sister",
            (_ask("fact", f"Which city does {name}'s sister live in?", c.sister_city, ("sister", c.sister)),),
        ),
        (
            f"{c.partner} (my partner) has been on night shifts as a {c.partner_job}, so we barely overlap.",
            "partner",
            (_ask("fact", f"What does {name}'s partner do for a living?", c.partner_job, ("partner", c.partner)),),
        ),
        (
            f"I signed up for {c.sport} lessons and my coach is {c.coach}, who is terrifyingly fit.",
            "coach",
            (_ask("fact", f"Who is {name}'s {c.sport} coach?", c.coach, ("coach",)),),
        ),
        (
            f"Honestly I cannot stand {c.dislike}. Never have, never will.",
            "dislike",
            (_ask("fact", f"What can {name} not stand?", c.dislike, ("stand",)),),
        ),
    ]


def _joins(cast: _Cast, name: str) -> list[tuple[str, str, Question]]:
    """Second turns that name a person only by name: the question asks by relation, so it needs both turns."""
    c = cast
    return [
        (
            f"{c.sister} got the job at the {c.sister_work}, she starts in a fortnight and is over the moon.",
            "sister",
            _ask("join", f"Where did {name}'s sister get a job?", c.sister_work, (c.sister,)),
        ),
        (
            f"{c.coach} said I should enter the club championship in spring, which is flattering and alarming.",
            "coach",
            _ask("join", f"What competition did {name}'s coach suggest entering?", "club championship", (c.coach,)),
        ),
    ]


def conversation(seed: int, *, tokens: int | None = None, style: str | None = None) -> Conversation:
    """One conversation of about ``tokens`` tokens (default: drawn in 22K–33K), all drawn from ``seed``."""
    from agent.tokens import count_messages

    rng = random.Random(seed)
    target = tokens or rng.randrange(22_000, 33_000)
    style = style or rng.choice(("friends", "assistant"))
    narrator, other = rng.sample(NAMES, 2)
    cast = _Cast.draw(rng, {narrator, other})
    start = dt.datetime(2025, 1, 6, 19, 0, tzinfo=dt.UTC) + dt.timedelta(days=rng.randrange(500))
    writer = _Writer(rng, style, narrator, other, start)
    convo = Conversation(f"everyday-s{seed}", style, narrator, other)
    rest: list[tuple[str, Any]] = [
        *(("event", event) for event in rng.sample(EVENTS, 7)),
        *(("plan", plan) for plan in rng.sample(PLANS, 3)),
        *(("paraphrase", item) for item in rng.sample(PARAPHRASES, 4)),
        *(("ask", item) for item in rng.sample(CHAT_QUESTIONS, 5)),
    ]
    rng.shuffle(rest)
    intros = [("intro", item) for item in _introductions(cast, narrator)]
    rng.shuffle(intros)
    # Every introduction comes before the join that names the person without the relation.
    tasks = [*intros[:3], *rest[:4], *intros[3:], *rest[4:9], *(("join", j) for j in _joins(cast, narrator)), *rest[9:]]
    session_budget = target / (len(tasks) + 2)
    introduced: dict[str, str] = {}
    while True:
        session_start = count_messages(writer.messages)
        writer.say(writer.filler(GREETINGS, 1) + " " + writer.filler(FILLER, 1), narrator=True)
        writer.say(writer.reply(), narrator=False)
        if tasks:
            writer.chat(rng.randint(1, 4))
            _tell(writer, convo, tasks.pop(0), introduced)
            writer.say(writer.reply(), narrator=False)
        while count_messages(writer.messages) - session_start < session_budget * rng.uniform(0.7, 1.3):
            writer.chat(1)
        if not tasks and count_messages(writer.messages) >= target:
            break
        writer.next_session()
    convo.messages = writer.messages
    _check(convo)
    return convo


def _tell(writer: _Writer, convo: Conversation, task: tuple[str, Any], introduced: dict[str, str]) -> None:
    """Say one planted fact (ending on the narrator's turn) and record the questions it answers."""
    kind, item = task
    name = convo.narrator
    if kind == "intro":
        text, key, questions = item
        turn = introduced[key] = writer.say(text, narrator=True)
        convo.questions += [_answered(q, turn) for q in questions]
    elif kind == "join":
        text, key, question = item
        turn = writer.say(text, narrator=True)
        (fact,) = question.facts
        # The name stands beside its relation in the introduction, and beside the asked-for fact here.
        first = Fact(fact.subject, (key,), introduced[key])
        convo.questions.append(
            Question(
                "join", question.question, (introduced[key], turn), (first, Fact(fact.answers, fact.subject, turn))
            )
        )
    elif kind == "event":
        _tell_event(writer, convo, item, name)
    elif kind == "plan":
        text, key, ask = item
        phrase, day = future_phrase(writer.rng, writer.today)
        turn = writer.say(writer.fill(text, when=phrase), narrator=True)
        fact = Fact(date_renderings(day), (key,), turn)
        convo.questions.append(Question("event-date", ask.format(name=name), (turn,), (fact,), date=day.isoformat()))
    elif kind == "paraphrase":
        text, key, question = item
        turn = writer.say(writer.fill(text), narrator=True)
        convo.questions.append(Question("paraphrase", question.format(name=name), (turn,), (Fact((key,), (), turn),)))
    else:
        asked, answer, key = item
        writer.say(writer.filler(FILLER, 1), narrator=True)
        ask = writer.say(writer.fill(asked), narrator=False)
        turn = writer.say(writer.fill(answer), narrator=True)
        convo.qa_pairs.append((ask, turn))
        question = writer.messages[-2]["content"]
        convo.questions.append(Question("in-chat", question, (turn,), (Fact((key,), (), turn),)))


def _answered(question: Question, turn: str) -> Question:
    facts = tuple(Fact(fact.answers, fact.subject, turn) for fact in question.facts)
    return Question(question.kind, question.question, (turn,), facts, question.asked_on, question.date)


def _tell_event(writer: _Writer, convo: Conversation, event: tuple[str, str, str], name: str) -> None:
    text, key, ask = event
    phrase, day = past_phrase(writer.rng, writer.today)
    turn = writer.say(writer.fill(text, when=phrase), narrator=True)
    iso = day.isoformat()
    fact = Fact(date_renderings(day), (key,), turn)
    taken = {q.date for q in convo.questions if q.kind == "date-relative"}
    convo.questions.append(Question("event-date", ask.format(name=name), (turn,), (fact,), date=iso))
    if iso not in taken:  # one event a day, so "what did X do that day" has one answer
        asking, asked_on = asking_phrase(writer.rng, day)
        relative = Fact((key,), date_renderings(day), turn)
        convo.questions.append(
            Question(
                "date-relative",
                f"What did {name} do {asking}?",
                (turn,),
                (relative,),
                asked_on=asked_on.isoformat(),
                date=iso,
            )
        )


_WORD = re.compile(r"[a-z][a-z'-]+")


def content_words(text: str, drop: tuple[str, ...] = ()) -> set[str]:
    """Lowercased words of four letters or more, minus ``drop`` and question grammar."""
    from agent.search_query import STOPWORDS

    return {
        word for word in _WORD.findall(text.lower()) if len(word) > 3 and word not in STOPWORDS and word not in drop
    }


def _check(convo: Conversation) -> None:
    """Every fact stands in the turn named for it; a paraphrase shares no content word (nor a 5-letter stem)."""
    by_id = {message["_id"]: message["content"] for message in convo.messages}
    for question in convo.questions:
        for fact in question.facts:
            text = by_id[fact.turn]
            needed = fact.subject if question.kind == "event-date" else fact.answers
            if not any(word.lower() in text.lower() for word in needed):
                raise AssertionError(f"{question.question!r}: turn {fact.turn} lacks {needed}")
        if question.kind == "paraphrase":
            answer = by_id[question.answer_ids[0]].lower()
            shared = {w for w in content_words(question.question, (convo.narrator.lower(),)) if w[:5] in answer}
            if shared:
                raise AssertionError(f"paraphrase {question.question!r} shares {shared} with its answer")
