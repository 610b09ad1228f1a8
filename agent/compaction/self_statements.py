"""Which sentences are a person's statement about themselves, and how firm a kind: one sentence at a time.

:mod:`agent.compaction.memory_notes` keeps what people say about themselves when a fold archives their messages;
this is the part that reads a single sentence and decides, with no model and no knowledge of who wrote it,
whether it is a statement about its speaker. It runs on every sentence of every folded message, so a sentence is
first tested against a few cheap anchored patterns, and most fail at their first word.

A statement says something of the speaker: their preferences, constraints, facts about themselves and their
family, standing instructions on how to answer them, and firm decisions. Every pattern is anchored at the
sentence's start (after a few words of small talk: "oh, and", "btw", "please"), so the subject is the speaker:
"my sister loves jazz", "Dana said she prefers tea" and "remember that Dana's password is …" never match. A
memory entry that is wrong costs more than one that is missing, so a sentence is refused when it asks, hedges or
supposes ("if", "maybe", "I think", "I'll"), reports someone's words ("said", "told"), quotes, names a secret (a
password, a card number), reads as engineering (:func:`agent.compaction.everyday.is_engineering`) or, for what
should be lasting, is tied to the moment ("tonight", "this week", "on Friday"). A plan ("I'm going to …") is a
decision only when said as settled ("It's settled: I'm going to sell the car").

The kind is a rank, firmest highest: what the speaker is called (6); their constraints, standing instructions and
what they asked to be remembered (5); facts about them and who is who in their life (4); preferences (3);
decisions (2). :func:`self_statement` gives it, with where the statement starts past its small talk.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from agent.compaction.everyday import CALLED, NAME_RELATION, RELATION, RELATION_NAME, is_engineering, is_name
from agent.compaction.sentences import is_advice, is_firm_decision
from agent.dates import WEEKDAYS

__all__ = ["self_statement"]


class _Rule(NamedTuple):
    """A kind of statement: how firm it is (higher first), what starts it, and whether words of the moment
    ("tonight") leave it standing (a birthday "tomorrow" is still a birthday; a dislike "tonight" is a mood)."""

    rank: int
    pattern: re.Pattern[str]
    lasting: bool


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
#: A word before "allergy" that says what of or how bad ("a bad nut allergy"), never whose or about what.
_QUALIFIER = r"(?:(?!(?:no|any|about|for|of|with|the|my|your|his|her|their|this|that)\b)[\w-]+ )"


def _rule(rank: int, pattern: str, *, lasting: bool = False) -> _Rule:
    return _Rule(rank, re.compile("(?i)(?:" + pattern + ")"), lasting)


_NAMING = _rule(
    6,
    r"(?:my name(?:'s| is)|(?:you can |just )?call me(?: by)?|i go by|i'?m called"
    r"|(?:everyone|everybody|people|folks|(?:my )?friends) calls? me)"
    r" (?P<name>(?-i:[A-Z][a-z][\w'-]*))(?!')"
    r"|i'?m (?P<intro>(?-i:[A-Z][a-z]+))(?=[,.!]|$| by the way| btw| here\b)"
    r"|my pronouns are \w+/\w+",
    lasting=True,
)
_INSTRUCTION = _rule(
    5,
    r"(?:always|never|from now on|going forward|in (?:the )?future|whenever you|(?:don'?t|do not)(?: ever)?|stop"
    r"|when you (?:answer|reply to|respond to|write to|talk to) me"
    r"|i(?: want| need|'d like| would like|'d prefer| would prefer) you to (?:always|never|stop))\b",
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
        r"|i (?:keep|eat) (?:kosher|halal)\b"
        r"|i(?: have|'ve got| have got) (?:a |an )?" + _QUALIFIER + r"{0,2}(?:allerg(?:y|ies)|intolerances?)"
        r"(?=[.,;!]|$| to\b| so\b| and\b)",
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
        r"|we(?:'ve| have)? (?:just |recently |finally |all )?(?:moved|relocated)(?: house| back)? to (?:the )?"
        r"(?!(?:Slack|Discord|Teams|WhatsApp|Signal|Telegram|Zoom|Google|GitHub|Notion)\b)(?-i:[A-Z])"
        r"|i (?:currently |now |still )?work (?:as|at|for|in)\b"
        r"|" + _I_AM + r" (?:currently |now )?(?:working as|employed (?:at|by))\b"
        r"|" + _I_AM + r" (?:a|an) (?:[\w-]+ )?(?:" + _OCCUPATION + r")\b(?!')"
        r"|i(?:'ve| have) been (?:a|an) (?:[\w-]+ )?(?:" + _OCCUPATION + r")(?= (?:for|since)\b|[.,;!]|$)"
        r"|i(?: have|'ve got| have got) (?:" + _COUNT + r") (?:[\w-]+ )?" + RELATION + r"s?\b(?!')"
        r"|(?:my|our) " + RELATION + r" (?:is )?(?:called|named) (?-i:[A-Z])"
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
        r" " + _REACTION + r"\w"
        r"|nothing (?:beats|compares to|tops) " + _REACTION + r"\w[^,.!?;]{0,40}? for me\b"
        r"|for me,? nothing (?:beats|compares to|tops) " + _REACTION + r"\w",
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
    r"|one more thing|fun fact|random fact|little[- ]known fact|full disclosure|to be clear)\b[\s,:;.!\u2014\u2013-]*)+"
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
#: A plan said as settled is a decision ("It's settled: I'm going to sell the car"), not an errand ("… going to bed").
_SETTLED = re.compile(
    r"(?i)(?:it'?s |that'?s )?(?:settled|decided)[\s:,;\u2014\u2013-]+(?:(?:i'?m|i am|we'?re|we are) going to"
    r"|(?:i|we)(?:'ll| will)) (?!(?:bed|sleep|the|a|an|my|our|your|be|see|have|go|come|call|text|ping|let|get)\b)(?=\w)"
)
_HAVE = re.compile(r"(?i)(?:i|we)(?: have|'ve got| have got|'ve) ")
#: First words a statement can open with: a sentence starting with none of them is passed over before any pattern.
_STARTS = frozenset(
    re.findall(
        r"\S+",
        """i i'm im i'd i've my our call everyone people friends always never from going in whenever don't dont do
    stop when we we'll we're we've let's lets remember keep bear note for can could would will everybody folks
    nothing""",
    )
)


def self_statement(sentence: str) -> tuple[int, int]:
    """``(start, rank)`` of one sentence (whitespace already collapsed): where the statement starts past its small
    talk ("Oh, and btw, "), and how firm a statement about the speaker the sentence is (0: none)."""
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
    settled = _SETTLED.match(rest)
    if settled:
        return start, _settled(rest[settled.end() :])
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


def _settled(what: str) -> int:
    """A settled plan (``what`` follows "I'm going to") is a firm decision unless it hedges or is of the moment."""
    if _REFUSED.search(what) or _MOMENT.search(what) or is_engineering(what) or is_advice(what):
        return 0
    return _DECISION.rank


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
    match = RELATION_NAME.match(rest)
    if match and match[1].lower() in ("my", "our") and match[3].strip(" ,"):
        return is_name(match[4], introduced=match[3] != " is ")
    named = NAME_RELATION.match(rest)
    if named and named.group(0)[len(named[1]) :].startswith(" is ") and named[2].lower() in ("my", "our"):
        return is_name(named[1]) and not is_engineering(rest)
    have = _HAVE.match(rest)
    called = CALLED.match(rest, have.end()) if have else None
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
