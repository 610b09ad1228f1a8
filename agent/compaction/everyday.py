"""What everyday conversation states, taken mechanically: people and who they are, dated events, plans and
promises, likes and dislikes, feelings and wants, places.

The rest of the deterministic notes were tuned on engineering logs, where the facts are identifiers. Two friends
over months, a family group or someone telling an assistant about their week carry none: their facts are "my
sister Ana", "started a pottery class last Saturday", "I'll send you the recipe", "can't stand cilantro". Read a
month later, "last Saturday" means nothing, so every date phrase is resolved against the day the message was
written (:func:`agent.dates.find_dates`) and the note says who said it and when.

Each :class:`Remark` is one short line; the digest keeps them per kind (bounded) and the fallback summary shares
one budget between them and the engineering sentences. A sentence this module claims (:attr:`Remarks.claimed`) is
not also listed as an engineering sentence, unless it carries an engineering signal (an identifier, a setting with
a number, a firm decision), so the same words never cost the budget twice. Results are memoized per message.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from agent.compaction.sentences import classify, is_greeting, split_sentences
from agent.dates import DateSpan, day_of, find_dates

#: Kinds of remark, in the order the summary's shared pool takes them.
KINDS = ("person", "event", "plan", "like", "feeling", "place")
#: Longest sentence a remark quotes (the start stays verbatim; the dates are resolved in it).
MAX_REMARK_CHARS = 140

#: Words a person is greeted, thanked or sent off with, right before their name ("Thanks Tom Baker").
ADDRESS_WORDS = frozenset(
    re.findall(
        r"\S+",
        """Hi Hey Hello Hiya Yo Bye Goodbye Goodnight Night Morning Thanks Thank Thx Cheers Congrats Congratulations
    Welcome Wow Whoa Omg Oh Ah Aw Aww Yay Haha Lol Dear Miss Love Hugs Sorry Happy Go Ok Okay Yes Yeah No Nope""",
    )
)
#: Capitalised words that are never a name: greetings, farewells, interjections, pronouns, openers, days.
ORDINARY_CAPITALS = frozenset(
    re.findall(
        r"\S+",
        """Hi Hey Hello Hiya Yo Bye Goodbye Goodnight Night Morning Evening Afternoon Thanks Thank Thx Ty Cheers
    Congrats Congratulations Welcome Wow Whoa Omg Oh Ah Aw Aww Awww Ooh Yay Haha Lol Lmao Hmm Huh Ugh Oops Yikes
    Damn Dang Yeah Yep Yup Yes No Nope Nah Ok Okay Sure Cool Nice Great Awesome Amazing Lovely Perfect Fine Good
    Glad Sorry Sad Poor Happy Merry Dear Love Lots Miss Hugs Xoxo See Talk Catch Speak Take Have Enjoy Safe
    Sounds Sound Same Well Wait Anyway Anyways Honestly Totally Really Just Actually Also Btw Fyi Guess Hope Maybe
    Please Let Say Tell Call Text Ask Send Give Get Go Come Look Check Did Do Does Is Are Was Were Can Could Would
    Will Should Not Never Always Still Even Only So And But Or If Then When Where What Which Who Why How The This
    That These Those There Here It Its We You They He She Him Her His Hers Our Your Their Me My Mine I Im Ive
    Today Tonight Tomorrow Yesterday Weekend Monday Tuesday Wednesday Thursday Friday Saturday Sunday January
    February March April May June July August September October November December Mom Mum Dad Grandma Grandpa
    Christmas Easter Halloween Thanksgiving Birthday Finally Luckily Sadly Basically Seriously Apparently
    Meanwhile Plus Besides Afterwards Later Now Recently Lately Last Next First Second Funny Speaking Remember
    Hopefully Unfortunately Fortunately Obviously Literally Definitely Probably Anyhow Otherwise""",
    )
)
#: Words that are never a name even right after "my sister" ("I saw my mom Saturday"): days, months, pronouns.
_TIME_AND_PRONOUNS = frozenset(
    re.findall(
        r"\S+",
        """Today Tonight Tomorrow Yesterday Weekend Monday Tuesday Wednesday Thursday Friday Saturday Sunday January
    February March April June July August September October November December Christmas Easter Halloween
    Thanksgiving I Im Ive We You They He She It And But Or So Then The This That""",
    )
)

#: A relation word, a person or a pet of someone's life ("sister", "best friend", "puppy"), as a regex fragment.
RELATION = (
    r"(?:(?:little|older|younger|big|baby|twin|best|new|old|step|great)[ -])?"
    r"(?:sister|brother|sis|bro|mom|mum|mother|dad|father|parents?|son|daughter|kids?|child|baby|wife|husband"
    r"|partner|boyfriend|girlfriend|fianc[ée]e?|spouse|grandma|grandmother|grandpa|grandfather|granddaughter"
    r"|grandson|aunt|uncle|cousin|niece|nephew|friend|roommate|flatmate|neighbou?r|boss|manager|coworker"
    r"|co-worker|colleague|coach|teacher|tutor|doctor|therapist|trainer|mentor|landlord|landlady|dog|cat|puppy"
    r"|kitten|pet|horse|bird|rabbit|hamster)(?:-in-law)?"
)
_NAME = r"([A-Z][a-z]+(?:-[A-Z][a-z]+)?)"
_WHOSE = r"\b([Mm]y|[Oo]ur|[Hh]er|[Hh]is|[Tt]heir|[Yy]our|[A-Z][a-z]+'s)"
#: "my sister Ana", "her husband, Tom", "my dog is called Biscuit".
RELATION_NAME = re.compile(
    _WHOSE + r" (" + RELATION + r")(,? | is called | called | named |'s name is | is )" + _NAME + r"\b"
)
#: "a labrador puppy called Ziggy", "a friend named Sam": the speaker's, named as it is introduced.
#: The word before the relation is kept ("a spaniel puppy"): it is often what the pet or person is asked after by.
CALLED = re.compile(r"\b(?:[Aa]n?|[Tt]he) (?:([a-z]+) )?(" + RELATION + r") (?:called|named) " + _NAME + r"\b")
#: "Ana, my sister", "Tom is her husband".
NAME_RELATION = re.compile(r"\b" + _NAME + r"(?:, | is | \()" + _WHOSE[2:] + r" (" + RELATION + r")\b")

_FUTURE = re.compile(
    r"(?i)\b(?:i'll|we'll|i will|we will|i shall|going to|gonna|plan(?:s|ning)? to|i promise|promise to"
    r"|can'?t wait to|looking forward to|hoping to|about to|let'?s|promised)\b"
)
_LIKE = re.compile(
    r"(?i)\b(?:love|loves|loved|adore|adores|enjoy|enjoys|enjoyed|i like|we like|really like|(?:she|he|they) likes?"
    r"|i'?m (?:really )?into|obsessed with|(?:my )?fav(?:ou?rite)?|hate|hates|can'?t stand|cannot stand|dislike"
    r"|don'?t like|doesn'?t like|not a fan of|allergic to|can'?t eat|don'?t eat|can'?t get enough of)\b"
)
#: A "love" that is affection or a sign-off, not a liking ("love you", "love it!", "would love to").
_HOLLOW_LIKE = re.compile(r"(?i)\b(?:love|loved|hate) (?:you|u|ya|it|that|this|to)\b[.!?]*$|\bwould love\b")
_FEELING = re.compile(
    r"(?i)\b(?:i'?m|i am|i feel|i felt|i was|feeling|i've been|we're|we are)(?: so| really| very| a bit| pretty"
    r"| kinda| super| quite| a little| totally)? (?:happy|sad|stressed|anxious|nervous|excited|tired|exhausted"
    r"|worried|lonely|overwhelmed|upset|angry|frustrated|thrilled|proud|scared|bored|sick|down|relieved|grateful"
    r"|homesick|burnt out|burned out|heartbroken|hopeful|confused|depressed|ecstatic)\b"
    r"|\b(?:i want|i wanna|i wish|i need|i'd love to|i'd like to|i really want|i hope|i'm hoping|dreaming of)\b"
)
#: A first-person happening the message's own day dates ("I got a new job", "we adopted a puppy").
_HAPPENED = re.compile(
    r"\b(?:(?i:i|we|she|he|they)|[A-Z][a-z]+)(?i:(?: just| finally)? (?:got|started|finished|moved|married"
    r"|graduated|adopted|bought|sold|won|lost|met|visited|quit|passed|broke up|got engaged|signed up|joined"
    r"|booked|ran))\b"
)
_HEDGE = re.compile(r"(?i)\b(?:might|maybe|perhaps|probably)\b")
#: Someone's words told on, led by their name ("Kofi said I should …", "Ana told me …").
_TOLD = re.compile(r"([A-Z][a-z]+) (?:said|says|told (?:me|us)|reckons|thinks|suggested)\b")
#: An outing or an ordeal someone may be asked the day of ("went to", "tried", "had my tooth out").
_OUTING = re.compile(r"(?i)\b(?:went|tried|did|had|saw|took|joined|hosted|celebrated|watched|ran|got)\b")
_PLACE = re.compile(
    r"\b(?:(?:go|goes|going|went|gone|move|moved|moving|fly|flying|flew|trip|drive|driving|drove|travel\w*"
    r"|heading|headed|back|flight|train|road trip|way) to|(?:live|lives|living|lived|settled|staying|stayed"
    r"|based|born|grew up|holiday|vacation|trip|weekend|week|days|night|flat|house|job|working) (?:in|at|near)"
    r"|[Vv]isit|[Vv]isiting|[Vv]isited) ([A-Z][a-z]+(?: [A-Z][a-z]+)?)\b(?!')"
)
#: What makes a sentence engineering: an identifier (a path, a hex id, snake_case, camelCase, a ticket key), a
#: firm decision, a technical word.
_ENGINEERING = re.compile(
    r"`|\w/\w|#\d|\b[0-9a-f]{7,40}\b|\w\.\w+\(|\b[a-z]\w*_\w+|\b[a-z]+[A-Z]\w*|\b[A-Z]{2,}-\d+"
    r"|\b\w+\.(?:py|js|ts|go|rs|json|ya?ml|toml|md)\b"
    r"|(?i:\b(?:decided|agreed|settled on|going with|let'?s use|instead of|rather than|commit|deploy|merge"
    r"|branch|server|api|database|bug|error|exception|test(?:s|ing)?|port|config|build|release)\b)"
)
_CAPITALISED = re.compile(r"(?<=[a-z,] )[A-Z][a-z]+")
_POSSESSIVES = frozenset({"my", "our", "her", "his", "their", "your"})
#: Words after which a date phrase is the sentence's point and cannot be taken out ("the party is tomorrow").
_LINKING = frozenset({"is", "was", "are", "were", "be", "been", "it's", "that's", "till", "til"})
_PREPOSITIONS = ("in ", "on ", "at ", "by ", "since ", "until ", "from ", "for ", "during ")


class Remark(NamedTuple):
    """One line of everyday notes: its kind (:data:`KINDS`), its text, its score (denser first)."""

    kind: str
    text: str
    score: int


class Remarks(NamedTuple):
    """A message's remarks, and the sentences they stand for (not to be listed again as engineering sentences)."""

    items: tuple[Remark, ...]
    claimed: frozenset[str]


def speaker_of(message: Mapping[str, Any]) -> str:
    """Who wrote a message: its sender's display name when known, else "the user" or "the assistant"."""
    sender = message.get("_from")
    if isinstance(sender, str) and sender.strip():
        return " ".join(sender.split())
    return "the assistant" if message.get("role") == "assistant" else "the user"


def written_day(message: Mapping[str, Any]) -> dt.date | None:
    """The UTC calendar day a message was written (its ``_ts``), or None when it has none."""
    ts = message.get("_ts")
    if isinstance(ts, int | float) and not isinstance(ts, bool) and ts > 0:
        return day_of(float(ts))
    return None


def is_name(word: str, *, introduced: bool = False) -> bool:
    """Whether a capitalised word can be a person's (or a pet's) name: never a greeting, interjection, opener,
    day or month. A word ``introduced`` as a name ("my friend Will") is only checked against days, months and
    pronouns: there "Will" or "May" can be nothing else."""
    if len(word) < 2 or not word[0].isupper():
        return False
    head = word.split("-")[0]
    return head not in _TIME_AND_PRONOUNS and (introduced or head not in ORDINARY_CAPITALS)


def is_engineering(sentence: str) -> bool:
    """Whether a sentence carries what the engineering notes keep (identifiers, firm decisions, technical words)."""
    return bool(_ENGINEERING.search(sentence))


def message_remarks(message: Mapping[str, Any], text: str) -> Remarks:
    """The remarks of one conversation message (a person's or the assistant's words)."""
    by_user = message.get("role") != "assistant"
    return remarks(text, speaker_of(message), written_day(message), by_user)


@functools.lru_cache(maxsize=16_384)
def remarks(text: str, speaker: str, written: dt.date | None, by_user: bool) -> Remarks:
    """Every remark of one message's text, said by ``speaker`` on ``written`` (None: unknown day)."""
    items: list[Remark] = []
    claimed: set[str] = set()
    source = f"{speaker}, {written.isoformat()}" if written else speaker
    for sentence in split_sentences(text):
        if is_greeting(sentence) or is_engineering(sentence):
            continue
        items += _people(sentence, speaker, written)
        said = _statement(sentence, written, by_user)
        if said is not None and said[0] == "feeling" and _is_preference(sentence, by_user):
            said = None  # "I want it short, always": the preferences keep it as written
        if said is not None:
            kind, (day, content), score = said
            lead = f"{day} {speaker}" if day else speaker
            items.append(Remark(kind, f"{lead}: {content}", score))
            claimed.add(sentence)
        people = {item.text.split(":", 1)[0] for item in items if item.kind == "person"}
        items += [Remark("place", f"{place} ({source})", 1) for place in _places(sentence) if place not in people]
    return Remarks(tuple(_unique(items)), frozenset(claimed))


def _is_preference(sentence: str, by_user: bool) -> bool:
    classified = classify(sentence, by_user)
    return classified is not None and classified.kind == "preference"


def _unique(items: list[Remark]) -> list[Remark]:
    seen: set[tuple[str, str]] = set()
    out = []
    for item in items:
        if (item.kind, item.text) not in seen:
            seen.add((item.kind, item.text))
            out.append(item)
    return out


def _people(sentence: str, speaker: str, written: dt.date | None) -> list[Remark]:
    """Who someone is to whom: "Ana: Maya's sister (2023-05-08)" (the speaker is named by the possessor), "Tom: her
    husband (Maya, 2023-05-08)" (the speaker is said: "her" is someone in their story)."""
    found: list[Remark] = []
    pairs = [(m[4], m[1], m[2], m[3] != " is ") for m in RELATION_NAME.finditer(sentence)]
    pairs += [(m[1], m[2], m[3], m.start() > 0) for m in NAME_RELATION.finditer(sentence)]
    pairs += [(m[3], "my", " ".join(filter(None, (m[1], m[2]))), True) for m in CALLED.finditer(sentence)]
    for name, whose, relation, introduced in pairs:
        if not is_name(name, introduced=introduced) or not _possessor_ok(whose):
            continue
        own = whose.lower() in ("my", "our") or speaker == "the assistant"
        said = [] if own else [speaker]
        source = ", ".join([*said, written.isoformat()] if written else said)
        told = f"{name}: {_whose(whose, speaker)} {relation.lower()}"
        found.append(Remark("person", f"{told} ({source})" if source else told, 4))
    return found


def _possessor_ok(whose: str) -> bool:
    return whose.lower() in _POSSESSIVES or is_name(whose[:-2])


def _whose(whose: str, speaker: str) -> str:
    """The possessor in the note's own words: "my" is the speaker's, "Ana's" stays; "her", "our" as written."""
    if whose.lower() == "my":
        return f"{speaker}'s"
    if whose.lower() == "our":
        return f"{speaker}'s family's" if speaker != "the assistant" else "our"
    return whose if whose.lower() not in _POSSESSIVES else whose.lower()


def _statement(sentence: str, written: dt.date | None, by_user: bool) -> tuple[str, tuple[str, str], int] | None:
    """``(kind, (day, content), score)`` of what a sentence states beyond who is who, or None.

    A plan or promise (words of intent, or a date still to come) comes first, then a dated happening, then a
    liking, then a feeling or want. A question states nothing. The assistant's intents are its narration
    ("I'll check") unless they carry a date, so of its sentences only dated plans (a reminder) count.
    """
    if sentence.rstrip().endswith("?") or len(sentence) < 8:
        return None
    spans = find_dates(sentence, written) if written else []
    content = _resolved(sentence, spans, written)
    future = any(span.start > written for span in spans) if written else False
    if (future or _FUTURE.search(sentence)) and (by_user or spans):
        return "plan", content, (3 + _telling(sentence, spans, written)) if by_user else 3
    if not by_user:
        return None
    if spans:
        return "event", content, 3 + _telling(sentence, spans, written)
    return _personal(sentence, content)


def _telling(sentence: str, spans: list[DateSpan], written: dt.date | None) -> int:
    """Points for what makes a dated line worth its room: a date at all, above all one that names a single other
    day than the message's ("last Thursday", not "this week" or "tonight": the day of a happening someone may
    ask about), and a happening or a name in it (not the weather or the week's meal prep); a hedge ("might",
    "maybe") takes one back: it has not happened."""
    day = any(span.start == span.end and span.start != written for span in spans)
    named = any(is_name(word) for word in _CAPITALISED.findall(sentence[1:]))
    told = bool(_HAPPENED.search(sentence) or _OUTING.search(sentence) or named)
    return bool(spans) + 2 * day + told - bool(_HEDGE.search(sentence))


def _personal(sentence: str, content: tuple[str, str]) -> tuple[str, tuple[str, str], int] | None:
    """An undated sentence of a person's: a liking, a happening (dated by its message), what someone said to
    them ("Kofi said I should enter the championship": news of Kofi, not the speaker's own wish), a feeling or
    want."""
    if _LIKE.search(sentence) and not _HOLLOW_LIKE.search(sentence):
        return "like", content, 3
    told = _TOLD.match(sentence)
    if _HAPPENED.search(sentence) or (told is not None and is_name(told[1])):
        return "event", content, 3
    if _FEELING.search(sentence):
        return "feeling", content, 2
    return None


def _resolved(sentence: str, spans: list[DateSpan], written: dt.date | None) -> tuple[str, str]:
    """``(day, words)``: the day a line leads with, and the sentence as the note gives it, clipped.

    A sentence naming one day ("on Tuesday", "Yesterday") leads with that day and loses the phrase ("2023-05-06
    Maya: started a pottery class"): the shortest line that still answers "when". Otherwise it leads with the day
    it was written, and each date phrase is followed by its dates ("in 2023-06 ('next month')"). A leading "I " is
    dropped (the note names the speaker).
    """
    out = sentence
    day = written.isoformat() if written else ""
    single = _single_day(sentence, spans)
    if single is not None:
        start, end = single.at
        before = out[:start]
        if _word_before(before) in ("on ", "in ", "at "):
            before = before.rstrip()[: -len(_word_before(before).strip())]
        after = out[end:].lstrip()
        joiner = "" if not before.strip() or after[:1] in (",", ";", ".", "!", ":", "") else " "
        out = (before.rstrip() + joiner + after).lstrip(" ,;")
        day = single.start.isoformat()
    for span in sorted(spans if single is None else [], key=lambda span: span.at[0], reverse=True):
        start, end = span.at
        label = span.label()
        if span.phrase == label:
            continue
        preposition = _preposition(out[:start], span)
        out = f"{out[:start]}{preposition}{label} ('{span.phrase}'){out[end:]}"
    if out.startswith("I ") and len(out) > 2 and out[2].islower():
        out = out[2:]
    out = out.rstrip(" .!")
    if len(out) > MAX_REMARK_CHARS:
        out = out[: MAX_REMARK_CHARS - 1].rsplit(" ", 1)[0].rstrip(" ,;:") + "…"
    return day, out


def _single_day(sentence: str, spans: list[DateSpan]) -> DateSpan | None:
    """The one date phrase of a sentence when it names a single day and taking it out leaves the sense whole (not
    "since Monday" nor "until Friday")."""
    if len(spans) != 1 or spans[0].start != spans[0].end:
        return None
    span = spans[0]
    lower = span.phrase.lower()
    own = next((word for word in _PREPOSITIONS if lower.startswith(word)), None)
    before = sentence[: span.at[0]]
    if own is None and before.lower().rstrip().rsplit(" ", 1)[-1] in _LINKING:
        return None  # "my appointment is tomorrow": the phrase is what the sentence says
    word = own or _word_before(before)
    return span if word in ("on ", "in ", "at ", "") else None


def _word_before(before: str) -> str:
    """The preposition (with its space) just before a position, or ""."""
    word = before.lower().rstrip().rsplit(" ", 1)[-1] + " "
    return word if word in _PREPOSITIONS else ""


def _preposition(before: str, span: DateSpan) -> str:
    """The word the resolved date is led by: the phrase's own ("in March"), none when the sentence has one just
    before it ("On August 16"), else "on" a day or "in" a longer span."""
    lower = span.phrase.lower()
    own = next((word for word in _PREPOSITIONS if lower.startswith(word)), None)
    if own is not None:
        return own
    if _word_before(before):
        return ""
    return "on " if span.start == span.end else "in "


def _places(sentence: str) -> list[str]:
    """Places named after a preposition of place or travel ("to Lisbon", "in New York"), never a name's start."""
    places = []
    for match in _PLACE.finditer(sentence):
        words = match.group(1).split()
        if all(is_name(word) for word in words):
            places.append(match.group(1))
    return places
