"""What a fold says about the people who wrote it: entries for each person's memory, taken mechanically.

When a compaction folds messages into the archive, the standing things people said about themselves there ("I'm
vegetarian", "call me Dee", "always answer in metric units") must not go with them: each becomes an entry in that
person's memory. This runs with the deterministic notes too, so it is a pure function of the folded messages, no
model, and it runs on every compaction, so each sentence is first tested against a few cheap anchored patterns.

Only a person's own words count: a user message carrying ``_user`` (never the assistant's, a tool result, a
summary or a synthetic line), and only what its sentence says of the speaker: their preferences, constraints,
facts about themselves and their family, standing instructions on how to answer them, and firm decisions. Every
pattern is anchored at the sentence's start (after a few words of small talk: "oh, and", "btw", "please"), so the
subject is the speaker: "my sister loves jazz", "Dana said she prefers tea" and "remember that Dana's password is
…" never match. A memory entry that is wrong costs more than one that is missing, so a sentence is dropped when
it asks, hedges or supposes ("if", "maybe", "I think", "I'll"), reports someone's words ("said", "told"), quotes,
names a secret (a password, a card number), reads as engineering (:func:`agent.compaction.everyday.is_engineering`)
or, for what should be lasting, is tied to the moment ("tonight", "this week", "on Friday").

An entry's text is the speaker's sentence as written (whitespace collapsed, cut at a word to fit
:data:`MAX_NOTE_CHARS`) in double quotes, then the UTC day it was said::

    "I'm vegetarian." (said 2026-01-16)

(without the day when the message has no ``_ts``). The same sentence said twice by one person is one entry, with
the newest message's id and day. Each person's entries come firmest first: what they are called, then their
constraints and standing instructions, facts about them, preferences, decisions; in the order said within each.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from agent.compaction.everyday import (
    _CALLED,
    _NAME_RELATION,
    _RELATION,
    _RELATION_NAME,
    is_engineering,
    is_name,
    written_day,
)
from agent.compaction.sentences import _FENCED, _SPLIT, is_advice, is_firm_decision
from agent.dates import WEEKDAYS
from agent.messages import is_real_user_message
from agent.tokens import content_text

__all__ = ["MAX_NOTE_CHARS", "MemoryNote", "memory_notes"]

#: Longest entry text, the quotes and the day included.
MAX_NOTE_CHARS = 300
#: Shortest sentence read ("I'm 34", "I'm vegan").
_MIN_CHARS = 5


@dataclass(frozen=True)
class MemoryNote:
    """One entry for a person's memory: whose it is, its text, and the message it was said in."""

    person: str  # the message's "_user", e.g. "tg:42"
    text: str  # the entry as shown to the model and to the person, at most MAX_NOTE_CHARS
    message_id: str  # the message's "_id" ("" when it has none)


class _Rule(NamedTuple):
    """A kind of statement: how firm it is (higher first), what starts it, and whether words of the moment
    ("tonight") leave it standing (a birthday "tomorrow" is still a birthday; a dislike "tonight" is a mood)."""

    rank: int
    pattern: re.Pattern[str]
    lasting: bool


class _Found(NamedTuple):
    rank: int
    person: str
    sentence: str
    message: Mapping[str, Any]


_I_AM = r"(?:i'?m|i am)"
_ADVERB = (
    r"(?:(?:really|also|actually|absolutely|definitely|strongly|generally|usually|much|totally|honestly|just|still"
    r"|seriously|truly|genuinely|always|do|very much|so) )?"
)
#: Words after a liking that make it a reaction to the moment or a person in the room ("I love you", "I like that").
_REACTION = (
    r"(?!(?:you|u|ya|it|that|this|them|him|her|those|these|when|how|what|your|his|their|our|being|the (?:idea|sound"
    r"|look|way|fact|photo|pic|picture|video)|to (?:say|think|believe|admit|break|bother|ask|interrupt|hear))\b)"
)
_OCCUPATION = (
    r"student|teacher|nurse|doctor|physician|surgeon|dentist|pharmacist|vet|veterinarian|engineer|developer"
    r"|programmer|designer|architect|lawyer|solicitor|barrister|accountant|chef|cook|baker|writer|author|journalist"
    r"|editor|artist|painter|musician|photographer|scientist|researcher|professor|lecturer|farmer|plumber"
    r"|electrician|carpenter|mechanic|pilot|firefighter|paramedic|police officer|soldier|librarian|barista"
    r"|waiter|waitress|bartender|cashier|manager|consultant|analyst|translator|therapist|psychologist"
    r"|social worker|midwife|physiotherapist|carer|caregiver|tutor|chemist|biologist|physicist|economist|banker"
    r"|entrepreneur|freelancer|pensioner|retiree|homemaker|mum|mom|dad|mother|father|parent|grandmother"
    r"|grandfather|grandma|grandpa"
)
_FOODS = r"dairy|gluten|meat|pork|beef|fish|alcohol|sugar|caffeine|nuts|eggs|shellfish|lactose|wheat|soy|spicy food"
_COUNT = r"a|an|one|two|three|four|five|six|seven|\d{1,2}"


def _rule(rank: int, pattern: str, *, lasting: bool = False) -> _Rule:
    return _Rule(rank, re.compile("(?i)(?:" + pattern + ")"), lasting)


_NAMING = _rule(
    6,
    r"(?:my name(?:'s| is)|(?:you can |just )?call me(?: by)?|i go by|i'?m called|(?:everyone|people|friends) call me)"
    r" (?P<name>(?-i:[A-Z][a-z][\w'-]*))(?!')"
    r"|i'?m (?P<intro>(?-i:[A-Z][a-z]+))(?=[,.!]|$| by the way| btw| here\b)"
    r"|my pronouns are \w+/\w+",
    lasting=True,
)
_INSTRUCTION = _rule(
    5,
    r"(?:always|never|from now on|going forward|in (?:the )?future|whenever you|(?:don'?t|do not)(?: ever)?|stop"
    r"|when you (?:answer|reply to|respond to|write to|talk to) me"
    r"|i (?:want|need|'d like|would like) you to (?:always|never|stop))\b",
)
_DECISION = _rule(
    2,
    r"(?:i|we)(?:'ve| have)?(?: just| finally)? decided\b|i (?:chose|settled on)\b"
    r"|(?:we'll|we will|let'?s|we'?re|i'?m) (?:go|going) with\b",
)
_RULES = (
    _NAMING,
    _rule(
        5,
        _I_AM + r" " + r"(?:(?:very|severely|mildly|deathly|extremely|really|also|quite) )?"
        r"(?:allergic|intolerant|sensitive) to\b"
        r"|" + _I_AM + r" (?:also )?(?:a |an )?(?:strict |committed |lifelong )?(?:vegetarian|vegan|pescatarian"
        r"|pescetarian|teetotal(?:l?er)?|coeliac|celiac|diabetic|lactose[- ]intolerant|gluten[- ]intolerant|kosher"
        r"|halal|sober|non-drinker|colou?r[- ]?blind|deaf|hard of hearing|dyslexic|autistic|a wheelchair user)\b"
        r"|i (?:also )?(?:don'?t|do not|never|no longer|can'?t|cannot|can no longer|mustn'?t|must not)"
        r" (?:eat|drink|smoke|drive|tolerate|digest|have (?:any )?(?:" + _FOODS + r"))\b"
        r"|i (?:only|exclusively) (?:eat|drink|use|speak|read|wear|fly|buy|shop|cook|watch|listen to|travel)\b"
        r"|" + _I_AM + r" not (?:allowed|supposed|permitted) to (?:eat|drink|have|lift|drive|fly|smoke|run|use)\b"
        r"|i (?:keep|eat) (?:kosher|halal)\b",
    ),
    _INSTRUCTION,
    _rule(4, r"(?:my|our) birthday(?:'s| is)|i was born on\b", lasting=True),
    _rule(
        4,
        r"i (?:currently |now |still )?(?:live|reside) (?:in|near|at|on|outside|just outside|by)\b"
        r"|" + _I_AM + r" (?:currently |now )?(?:living|based|settled) (?:in|near|at|outside)\b"
        r"|" + _I_AM + r" (?:originally )?from (?-i:[A-Z])"
        r"|i (?:was born|grew up) in\b"
        r"|i(?:'ve| have)? (?:just |recently |finally )?(?:moved|relocated) to\b"
        r"|i (?:currently |now |still )?work (?:as|at|for|in)\b"
        r"|" + _I_AM + r" (?:currently |now )?(?:working as|employed (?:at|by))\b"
        r"|" + _I_AM + r" (?:a|an) (?:[\w-]+ )?(?:" + _OCCUPATION + r")\b(?!')"
        r"|i (?:have|'ve got|have got) (?:" + _COUNT + r") (?:[\w-]+ )?" + _RELATION + r"s?\b(?!')"
        r"|(?:my|our) " + _RELATION + r" (?:is )?(?:called|named) (?-i:[A-Z])"
        r"|" + _I_AM + r" (?:married|single|divorced|widowed|engaged|retired|pregnant|unemployed|self-employed"
        r"|left-handed)\b"
        r"|" + _I_AM + r" \d{1,2}(?: years old| yo)?(?=[.!,;]|$)",
    ),
    _rule(
        3,
        r"(?:i " + _ADVERB + r"(?:prefer|like|love|adore|enjoy|hate|dislike|detest|loathe|despise|avoid)"
        r"|i(?:'d| would) (?:much |really )?(?:rather|prefer)"
        r"|i " + _ADVERB + r"(?:can'?t|cannot) stand"
        r"|i " + _ADVERB + r"(?:don'?t|do not) (?:like|enjoy|care for)"
        r"|" + _I_AM + r" (?:not )?(?:a )?(?:big |huge )?fan of"
        r"|" + _I_AM + r" (?:really |so |totally )?into"
        r"|my (?:all[- ]time |absolute )?fav(?:ou?rite)? [\w -]{1,30}? (?:is|are))"
        r" " + _REACTION + r"\w",
    ),
    _DECISION,
)
_RELATION_RANK = 4
_REMEMBER_RANK = 5

#: Words of small talk a statement may follow ("Oh, and btw, I'm vegan"): stripped before the patterns are tried.
_OPENER = re.compile(
    r"(?i)(?:(?:oh|ah|well|so|and|but|also|plus|btw|by the way|fyi|ok|okay|yeah|yes|yep|no|nope|honestly|actually"
    r"|just so you know|for the record|for context|for reference|for what it'?s worth|fwiw|heads[- ]up"
    r"|side note|quick note|note(?! that)|ps|hey|hi|hello|hiya|sure|right|anyway|anyways|sounds good"
    r"|good question|no worries|fair enough|got it|thanks|thank you|cheers|great|cool|nice|perfect"
    r"|one more thing)\b[\s,:;.!\u2014\u2013-]*)+"
)
#: "Please" before a statement: read past, but kept in the entry ("Please don't use jargon.").
_PLEASE = re.compile(r"(?i)(?:please|pls)\b[\s,]*")
#: A request put as a question ("Could you always answer in metric?"): the one question that may hold a statement.
_POLITE = re.compile(
    r"(?i)(?:can|could|would|will) you(?: please)? (?=always\b|never\b|stop\b|remember\b|keep in mind\b|bear in mind"
    r"|call me\b)"
)
_REMEMBER = re.compile(
    r"(?i)(?:remember|keep in mind|bear in mind|don'?t forget|never forget|note that|for future reference)"
    r"(?: that)?[\s,:;-]+"
)
#: What a "remember …" must go on with to be about the speaker ("remember I'm on a budget").
_SELF = re.compile(
    r"(?i)(?:i'?m|i am|i have|i've got|i don'?t|i do not|i can'?t|i cannot|i never|i always|i only|i use|i work"
    r"|i live|my \w+(?: \w+)? (?:is|are)\b)"
)
#: What a standing instruction is about: how the bot answers this person.
_ANSWERING = re.compile(
    r"(?i)\b(?:answers?|repl(?:y|ies)|respond|responses?|write|explain|summari[sz]e|translate|format(?:ting)?"
    r"|emojis?|units|metric|imperial|celsius|fahrenheit|jargon|markdown|bullet points?|spoilers|sources"
    r"|address me|call me (?:by )?(?-i:[A-Z]))\b"
)
#: A bare "don't …" or "stop …" is an instruction about answering the speaker only when it says so ("don't use
#: jargon with me", "stop adding emojis"): in a group, "don't write that down" is said to someone in the room.
_BARE = re.compile(r"(?i)(?:don'?t|do not|stop)\b")
_TO_ME = re.compile(
    r"(?i)\b(?:me|my|answers|replies|responses|emojis?|units|metric|imperial|celsius|fahrenheit|jargon|markdown"
    r"|bullet points?|spoilers)\b"
)
#: A named person an instruction is about ("always reply to Dana in French"): not the speaker's to give.
_ABOUT_SOMEONE = re.compile(
    r"\b(?:answer|reply to|respond to|write to|call|tell|remind|ask|address|help|give|send|show|for|about|to|with)"
    r" ([A-Z][a-z]+)\b"
)
_POSSESSIVE = re.compile(r"\b([A-Z][a-z]+)'s\b")
_LANGUAGES = frozenset(
    re.findall(
        r"\S+",
        """English Spanish French German Italian Portuguese Dutch Polish Russian Japanese Chinese Mandarin Cantonese
    Korean Arabic Hindi Turkish Greek Swedish Norwegian Danish Finnish Ukrainian Hebrew Celsius Fahrenheit British
    American Markdown""",
    )
)
#: A sentence that supposes, hedges, asks, jokes, reports someone's words or names a secret: never an entry.
_REFUSED = re.compile(
    r"(?i)\b(?:if(?! you\b)|unless|might|maybe|perhaps|probably|possibly|i guess|i think|i suppose|i believe"
    r"|i feel like|not sure|unsure|wonder(?:ing)?|would(?! (?:rather|prefer|like you)\b)|could|hope|hoping|wish"
    r"|i'll|i will|gonna|going to|thinking (?:of|about)|considering|kinda|kind of|sort of|sometimes|someday"
    r"|jk|just kidding|joking|kidding|pretend|imagine|suppose|supposedly|apparently|in case"
    r"|said|says|told|tells|asked|asks|wrote|writes|mentioned|mentions|claims?|claimed|reckons|according to"
    r"|quot(?:e|ed|ing)|texted|messaged"
    r"|passwords?|passcode|passphrase|pin|ssn|social security|credit card|card number|cvv|api key|access token"
    r"|secret|iban|account number|sort code|seed phrase|private key)\b|[\"\u201c\u201d\u00ab\u00bb]"
)
#: Words that tie a sentence to the moment ("I can't stand him tonight", "I'm not allowed to go out this week").
_MOMENT = re.compile(
    r"(?i)\b(?:today|tonight|tomorrow|yesterday|right now|at the moment|atm|for now|this (?:morning|afternoon"
    r"|evening|week|weekend|month|time)|next (?:week|weekend|month|time)|last (?:night|week|weekend)"
    r"|" + "|".join(WEEKDAYS) + r")\b"
)
_HAVE = re.compile(r"(?i)(?:i|we)(?: have|'ve got| have got|'ve) ")
#: First words a statement can open with: a sentence starting with none of them is passed over before any pattern.
_STARTS = frozenset(
    re.findall(
        r"\S+",
        """i i'm im i'd i've my our call everyone people friends always never from going in whenever don't dont do
    stop when we we'll we're let's lets remember keep bear note for can could would will""",
    )
)


def memory_notes(folded: Sequence[Mapping[str, Any]], *, limit_per_person: int = 20) -> list[MemoryNote]:
    """The entries the folded messages give each person who wrote them, grouped by person (in the order of their
    entries' messages), each person's firmest first and at most ``limit_per_person`` of them.

    A note is only ever its speaker's: the ``_user`` of the message whose ``_id`` it carries, whoever the
    sentence names. The same sentence from one person is kept once, from the newest message saying it.
    """
    found: dict[tuple[str, str], _Found] = {}
    for message in folded:
        person = _person(message)
        if person is None:
            continue
        for sentence, rank in _statements(_own_text(message)):
            key = (person, _key(sentence))
            found.pop(key, None)  # the newest saying wins, and takes its place in the order said
            found[key] = _Found(rank, person, sentence, message)
    by_person: dict[str, list[_Found]] = {}
    for item in found.values():
        by_person.setdefault(item.person, []).append(item)
    notes: list[MemoryNote] = []
    for items in by_person.values():
        items.sort(key=lambda item: -item.rank)  # stable: the order said within a rank
        notes += [_note(item) for item in items[: max(limit_per_person, 0)]]
    return notes


def _person(message: Mapping[str, Any]) -> str | None:
    """Whose memory a message may feed: a person's own message (not a summary or a synthetic line) with ``_user``."""
    user = message.get("_user")
    if not isinstance(user, str) or not user.strip() or not is_real_user_message(message):
        return None
    return user.strip()


def _own_text(message: Mapping[str, Any]) -> str:
    """A message's text without the lines it quotes ("> …"): those are someone else's words."""
    text = content_text(message.get("content"))
    if ">" in text:
        text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(">"))
    return text


def _key(sentence: str) -> str:
    return " ".join(sentence.casefold().replace("\u2019", "'").split()).rstrip(".!\u2026 ")


def _note(item: _Found) -> MemoryNote:
    ident = item.message.get("_id")
    return MemoryNote(item.person, _note_text(item.sentence, item.message), ident if isinstance(ident, str) else "")


def _note_text(sentence: str, message: Mapping[str, Any]) -> str:
    """``"<sentence>" (said YYYY-MM-DD)``: the sentence cut at a word so the whole fits :data:`MAX_NOTE_CHARS`."""
    day = written_day(message)
    tail = f" (said {day.isoformat()})" if day else ""
    words = " ".join(sentence.split())
    room = MAX_NOTE_CHARS - len(tail) - 2
    if len(words) > room:
        words = words[: room - 1].rsplit(" ", 1)[0].rstrip(" ,;:") + "\u2026"
    return f'"{words}"{tail}'


@functools.lru_cache(maxsize=16_384)
def _statements(text: str) -> tuple[tuple[str, int], ...]:
    """``(sentence, rank)`` for each sentence of a message's text that is a statement about its speaker; fenced
    blocks (code, logs) are left out."""
    if "```" in text:
        text = _FENCED.sub("\n", text)
    found = []
    for raw in _SPLIT.split(text):
        sentence = " ".join(raw.split()).strip(" -*\u2022")
        if len(sentence) < _MIN_CHARS or sentence.startswith(("File ", "Traceback")):
            continue
        start, rank = _rank(sentence)
        if rank:
            found.append((sentence[start:], rank))
    return tuple(found)


def _rank(sentence: str) -> tuple[int, int]:
    """``(start, rank)``: where the statement starts past its small talk ("Oh, and btw, "), and how firm a
    statement about the speaker the sentence is (0: none)."""
    plain = sentence.replace("\u2019", "'")
    opener = _OPENER.match(plain)
    start = opener.end() if opener else 0
    rest = plain[start:]
    please = _PLEASE.match(rest)
    if please:
        rest = rest[please.end() :]
    polite = _POLITE.match(rest)
    if polite:
        rest = rest[polite.end() :]
    elif plain.rstrip().endswith("?"):
        return start, 0
    first = rest.split(" ", 1)[0].lower().rstrip(",.!:;")
    if first not in _STARTS and " is my " not in rest and " is our " not in rest:
        return start, 0
    rank = _ranked(rest)  # anchored patterns first: most sentences fail them at once
    if rank and (_REFUSED.search(rest) or is_advice(rest)):
        return start, 0
    return start, rank


def _ranked(rest: str) -> int:
    """The rank of the first kind of statement ``rest`` (a sentence past its small talk) opens with."""
    for rule in _RULES:
        match = rule.pattern.match(rest)
        if match is None or (not rule.lasting and _MOMENT.search(rest)):
            continue
        if is_engineering(rest[match.end() :]) or not _fits(rule, match, rest):
            continue
        return rule.rank
    if _relation(rest):
        return _RELATION_RANK
    return _remembered(rest)


def _fits(rule: _Rule, match: re.Match[str], rest: str) -> bool:
    """The checks a pattern alone cannot make: a name is a name, an instruction is about answering the speaker,
    a decision is firm."""
    if rule is _NAMING:
        if match["name"]:
            return is_name(match["name"], introduced=True)
        return match["intro"] is None or is_name(match["intro"])
    if rule is _INSTRUCTION:
        if _BARE.match(rest) and not _TO_ME.search(rest, match.end()):
            return False
        return bool(_ANSWERING.search(rest, match.end())) and not _about_someone(rest)
    if rule is _DECISION:
        return is_firm_decision(rest)
    return True


def _about_someone(rest: str) -> bool:
    """Whether an instruction or a "remember" names another person or what is theirs ("Dana's password")."""
    named = [m[1] for m in _ABOUT_SOMEONE.finditer(rest)] + [m[1] for m in _POSSESSIVE.finditer(rest)]
    return any(is_name(word) and word not in _LANGUAGES for word in named)


def _relation(rest: str) -> bool:
    """Who is who in the speaker's life, said as a naming: "my sister is Ana", "my dog is called Biscuit", "Ana is
    my sister", "I have a puppy named Ziggy" (not "my sister Ana loves jazz": that is about Ana)."""
    match = _RELATION_NAME.match(rest)
    if match and match[1].lower() in ("my", "our") and match[3].strip(" ,"):
        return is_name(match[4], introduced=match[3] != " is ")
    named = _NAME_RELATION.match(rest)
    if named and named.group(0)[len(named[1]) :].startswith(" is ") and named[2].lower() in ("my", "our"):
        return is_name(named[1]) and not is_engineering(rest)
    have = _HAVE.match(rest)
    called = _CALLED.match(rest, have.end()) if have else None
    return called is not None and is_name(called[3], introduced=True)


def _remembered(rest: str) -> int:
    """A sentence asking to remember something about the speaker ("remember that I'm vegetarian", "keep in mind
    I'm on a budget"); never about anyone else ("remember that Dana's password is …")."""
    match = _REMEMBER.match(rest)
    if match is None:
        return 0
    said = rest[match.end() :]
    if _about_someone(said) or _MOMENT.search(said) or is_engineering(said):
        return 0
    inner = _ranked(said)
    if inner or _SELF.match(said):
        return max(inner, _REMEMBER_RANK)
    return 0
