"""Which sentences are a person's statement about themselves, and how firm a kind: one sentence at a time.

:mod:`agent.compaction.memory_notes` keeps what people say about themselves when a fold archives their messages;
this is the part that reads a single sentence and decides, with no model and no knowledge of who wrote it,
whether it is a statement about its speaker. A sentence is first read as people type it
(:func:`agent.compaction.chat_wording.plain`: "im", "pls", "bday", emoji, a trailing "tbh"), and the patterns are
tried where a statement may start: past the small talk that opens the sentence ("Morning! oh and", "btw",
"please"), after a pause in it ("Quick thing — …", "…: I'm allergic to …"), and at the speaker's own "I", "my",
"we" ("By day I'm a nurse"). It runs on every sentence of every folded message, so a pattern is tried only where
the sentence holds a word it needs, and most sentences are passed over on their words alone.

A statement says something of the speaker: their preferences, constraints, facts about themselves and their
family, standing instructions on how to answer them, and firm decisions. The subject is always the speaker
("I", "we", "my", a name "is what everyone calls me"), so "my sister loves jazz", "Dana said she prefers tea" and
"remember that Dana's password is …" never match; nor does a statement after words that make it another's or
conditional ("Dana knows I …", "when I …", "Dana: I …"). A memory entry that is wrong costs more than one that is
missing, so a sentence is refused when it asks, hedges or supposes ("if", "maybe", "I think", "I'll"), reports
someone's words ("said", "told"), quotes, names a secret, reads as engineering
(:func:`agent.compaction.everyday.is_engineering`) or, for what should be lasting, is tied to the moment
("tonight", "this week", "on Mondays"). A plan ("I'm going to …") is a decision only when said as settled ("It's
settled: I'm going to …", "Decision made: we're going to …", "I'm definitely going to …", "…, decided last night").

The kind is a rank, firmest highest: what the speaker is called (6); their constraints, standing instructions and
what they asked to be remembered (5); facts about them and who is who in their life (4); preferences (3);
decisions (2). :func:`self_statement` gives it, with where the statement starts: past the small talk, or, for a
statement inside a sentence, where its clause starts (the entry keeps "By day" of "By day I'm a nurse").
"""

from __future__ import annotations

import re
from typing import NamedTuple

from agent.compaction.chat_wording import origin, plain
from agent.compaction.everyday import CALLED, NAME_RELATION, RELATION, RELATION_NAME, is_engineering, is_name
from agent.compaction.self_words import (
    ADVERB,
    ANSWERING,
    CONSTRAINT_WORDS,
    COUNT,
    DATE,
    DIETS,
    ERRAND,
    FACT_WORDS,
    FOODS,
    I_AM,
    LANGUAGES,
    MANNER,
    MOMENT,
    MONTH,
    OCCUPATION,
    OPENER,
    QUALIFIER,
    REACTION,
    REFUSED,
    STARTS,
    SUBORDINATE,
    TELLING,
    TO_ME,
)
from agent.compaction.sentences import is_advice, is_firm_decision

__all__ = ["self_statement"]


class _Read(NamedTuple):
    """A sentence as read once for all the places a statement may start in it: its text (:func:`plain`'s), whether
    it asks, its words, and whether it holds a phrase that may open a statement whatever its first word."""

    text: str
    asks: bool
    words: frozenset[str]
    telling: bool


class _Rule(NamedTuple):
    """A kind of statement: how firm it is (higher first), what starts it, and whether words of the moment
    ("tonight") leave it standing (a birthday "tomorrow" is still a birthday; a dislike "tonight" is a mood)."""

    rank: int
    pattern: re.Pattern[str]
    lasting: bool
    #: Words (lower case) of which a sentence must hold one for the pattern to be tried at all: a look at a set
    #: that spares most chatter the pattern (empty: always tried).
    needs: frozenset[str]


def _rule(rank: int, pattern: str, *, lasting: bool = False, needs: str = "") -> _Rule:
    return _Rule(rank, re.compile("(?i)(?:" + pattern + ")"), lasting, frozenset(needs.split()))


_NAMING = _rule(
    6,
    r"(?:(?:my )?(?:name|nickname)(?:'s| is)|the name'?s|(?:you can |just )?call me(?: by)?|i go by|i'?m called"
    r"|i(?:'d)? prefer (?:to be|being) called|i'?d (?:rather|prefer|like) (?:it if )?you call(?:ed)? me"
    r"|(?:everyone|everybody|people|folks|(?:my )?(?:friends|mates|family)) calls? me)"
    r" (?P<name>(?-i:[A-Z][a-z][\w'-]*))(?!')"
    r"|(?P<called>(?-i:[A-Z][a-z][\w'-]*)) is what (?:everyone|everybody|people|folks|(?:my )?friends) calls? me"
    r"|i'?m (?P<intro>(?-i:[A-Z][a-z]+))(?=[,.!]|$| by the way| btw| here\b)"
    r"|my pronouns are \w+/\w+",
    lasting=True,
    needs="name name's nickname nickname's call called calls go pronouns i'm am",
)
_INSTRUCTION = _rule(
    5,
    r"(?:always|never|from now on|going forward|in (?:the )?future|whenever you|(?:don'?t|do not)(?: ever)?|stop"
    r"|when you (?:answer|reply to|respond to|write to|talk to) me|remember to(?: always)?"
    r"|i(?: want| need|'d like| would like|'d prefer| would prefer) you to (?:always|never|stop))\b",
    needs="always never from going future whenever don't do stop when remember",
)
#: An instruction put as how to answer ("reply in Spanish from now on", "keep your answers short, please"); the
#: forms that name the answers themselves ("keep your answers …", "default to …") are standing as said.
_HOW = _rule(
    5,
    r"(?:(?:always |only )?(?:answer|reply|respond|write|talk)(?: to me| me)?"
    r"|(?P<standing>(?:default|stick) to (?:answering|replying|responding|writing|talking)(?: to me| me)?"
    r"|keep (?:your|the|all your) (?:answers|replies|responses|messages)"
    r"|i (?:want|need|'d like|would like|'d prefer|would prefer) (?:all )?(?:your|the) (?:answers|replies|responses"
    r"|messages)(?: to me)?(?: to be)?)) " + MANNER,
    needs="answer answers answering reply replies replying respond responding write writing talk talking default"
    " stick keep",
)
#: What makes a bare "reply in Spanish" standing rather than about the message at hand.
_STANDING = re.compile(
    r"(?i)\b(?:me|my|please|always|from now on|going forward|in (?:the )?future|by default|every time)\b"
)
_CHOSEN = re.compile(r"(?i)\b(?:made up|chosen|opted)\b")
_DECISION = _rule(
    2,
    r"(?:i|we)(?:'ve| have)?(?: just| finally)? decided\b|i (?:chose|settled on)\b"
    r"|(?:i|we)(?:'ve| have)? (?:just |finally )?(?:made up (?:my|our) minds?|chosen|opted) to\b"
    r"|(?:we'll|we will|let'?s|we'?re|i'?m) (?:go|going) with\b",
    needs="decided chose settled made chosen opted go going",
)
_RULES = (
    _NAMING,
    _rule(
        5,
        I_AM + r" " + r"(?:(?:very|severely|mildly|deathly|extremely|really|also|quite) )?"
        r"(?:allergic|intolerant|sensitive) to\b"
        r"|" + I_AM + r" (?:also )?(?:a |an )?(?:strict |committed |lifelong )?(?:" + DIETS + r")\b"
        r"|i (?:also )?(?:don'?t|do not|never|no longer|can'?t|cannot|can no longer|mustn'?t|must not)"
        r" (?:eat|drink|smoke|drive|tolerate|digest|have (?:any )?(?:" + FOODS + r"))\b"
        r"|i (?:only|exclusively) (?:eat|drink|use|speak|read|wear|fly|buy|shop|cook|watch|listen to|travel)\b"
        r"|" + I_AM + r" not (?:allowed|supposed|permitted) to (?:eat|drink|have|lift|drive|fly|smoke|run|use)\b"
        r"|i (?:keep|eat) (?:kosher|halal)\b"
        r"|i(?:'ve| have) been (?:a |an )?(?:strict )?(?:" + DIETS + r")\b"
        r"|i (?:also )?(?:don'?t|do not|can'?t|cannot|never) (?:go near|be around|touch|do (?:" + FOODS + r"))\b"
        r"(?! (?:you|him|her|them|it|that|this|those|these|there|here|people|anyone)\b)"
        r"|(?:i|i've|i have) (?:stopped|given up|gave up|quit) (?:eating|drinking|smoking)\b"
        r"|i react (?:really |very |quite )?(?:badly|terribly|severely|strongly) to\b"
        r"|i (?:carry|have|need|use) an? (?:epipen|epi-pen|inhaler|insulin pump|hearing aid|wheelchair)\b"
        r"|(?:" + FOODS + r") (?:makes?|gives?) me (?:\w+ )?(?:ill|sick|poorly|hives|a rash|migraines?)\b"
        r"|(?!(?:no|not|any|zero)\b)(?:[\w-]+ ){1,3}(?:allergy|intolerance|allergic)(?: sufferer)? here\b"
        r"|i(?: have|'ve got| have got) (?:a |an )?" + QUALIFIER + r"{0,2}(?:allerg(?:y|ies)|intolerances?)"
        r"(?=[.,;!]|$| to\b| so\b| and\b)",
        needs=CONSTRAINT_WORDS,
    ),
    _INSTRUCTION,
    _HOW,
    _rule(
        4,
        r"(?:my|our) birthday(?:'s| is| falls| lands)|i was born on\b|it'?s my birthday on\b"
        r"|i (?:celebrate|have) my birthday on\b|i turn \d{1,3} on\b|"
        + I_AM
        + r" an? "
        + MONTH
        + r"(?: \d{1,2})? baby\b"
        r"|" + DATE + r" is (?:my|our) birthday\b",
        lasting=True,
        needs="birthday birthday's born baby turn",
    ),
    _rule(
        4,
        r"(?:i|we) (?:currently |now |still )?(?:live|reside) (?:in|near|at|on|outside|just outside|by)\b"
        r"|(?:" + I_AM + r"|we'?re|we are) (?:currently |now )?(?:living|based|settled) (?:in|near|at|outside)\b"
        r"|(?:i|we)(?:'ve| have) (?:lived|been living|been based) (?:in|near|at|outside)\b"
        r"|(?:(?:i|we)(?:'ve| have)? )?(?:just |recently |finally |all )?(?:moved|relocated)(?: house| back)? to"
        r" (?:the )?"
        r"(?!(?:Slack|Discord|Teams|WhatsApp|Signal|Telegram|Zoom|Google|GitHub|Notion)\b)(?-i:[A-Z])"
        r"|(?:i|we)(?:'ve| have)? (?:just |recently |finally )?made the (?:big )?move to (?-i:[A-Z])"
        r"|home(?:'s| is) (?:now )?(?-i:[A-Z])",
        lasting=True,
        needs="live living lived reside based settled moved relocated move home home's",
    ),
    _rule(
        4,
        I_AM + r" (?:originally )?from (?-i:[A-Z])"
        r"|i (?:was born|grew up) in\b"
        r"|i(?:'ve| have)? (?:just |recently |finally )?(?:moved|relocated) to\b"
        r"|i (?:currently |now |still )?work (?:as|at|for|in)\b"
        r"|" + I_AM + r" (?:currently |now )?(?:working as|employed (?:at|by))\b"
        r"|i(?:'ve| have)? (?:just )?(?:started|got|landed|taken|took|begun|began) (?:a |my )?(?:new )?"
        r"(?:job|role|position|career) as an?\b|i (?:do|work) (?:shifts|nights) as an?\b"
        r"|i (?:earn|make) (?:my|a) living as an?\b"
        r"|" + I_AM + r" (?:a|an) (?:[\w-]+ )?(?:" + OCCUPATION + r")\b(?!')"
        r"|i(?:'ve| have) been (?:a|an) (?:[\w-]+ )?(?:" + OCCUPATION + r")(?= (?:for|since)\b|[.,;!]|$)"
        r"|i(?: have|'ve got| have got) (?:" + COUNT + r") (?:[\w-]+ )?" + RELATION + r"s?\b(?!')"
        r"|(?:my|our) " + RELATION + r"(?:'s| is)? (?:called|named) (?-i:[A-Z])"
        r"|" + I_AM + r" (?:married|single|divorced|widowed|engaged|retired|pregnant|unemployed|self-employed"
        r"|left-handed)\b",
        needs=FACT_WORDS,
    ),
    _rule(4, I_AM + r" \d{1,2}(?: years old| yo)?(?=[.!,;]|$)"),
    _rule(
        3,
        r"(?:i " + ADVERB + r"(?:prefer|like|love|adore|enjoy|hate|dislike|detest|loathe|despise|avoid)"
        r"|i(?:'d| would) (?:much |really )?(?:rather|prefer)"
        r"|i " + ADVERB + r"(?:can'?t|cannot) stand"
        r"|i " + ADVERB + r"(?:don'?t|do not) (?:like|enjoy|care for)"
        r"|" + I_AM + r" (?:not )?(?:a )?(?:big |huge )?fan of"
        r"|" + I_AM + r" (?:not )?(?:really |so |totally |very |that |too )?(?:into|in love with|obsessed with"
        r"|mad about(?! (?:the|this|that|it|what|how|being)\b)|crazy about|nuts about|partial to|keen on|hooked on"
        r"|fond of)"
        r"|i(?:'ve| have) (?:always|never) (?:loved|liked|enjoyed|hated|disliked|been into|been a fan of|cared for)"
        r"|i(?:'ve| have)(?: got)? no time for|(?:i " + ADVERB + r")?(?:can'?t|cannot) (?:abide|bear|be doing with)"
        r"|my (?:all[- ]time |absolute )?fav(?:ou?rite)? [\w -]{1,30}? (?:is|are))"
        r" " + REACTION + r"\w"
        r"|nothing (?:beats|compares to|tops) " + REACTION + r"\w[^,.!?;]{0,40}? for me\b"
        r"|for me,? nothing (?:beats|compares to|tops) " + REACTION + r"\w"
        r"|(?:i'?d (?:always )?(?:pick|choose|take|go for)|give me) " + REACTION + r"\w[^,.!?;]{0,40}? (?:any day|every"
        r" time|over)\b",
        needs="prefer like love adore enjoy hate dislike detest loathe despise avoid rather stand care fan into"
        " obsessed mad crazy nuts partial keen hooked fond time abide bear doing fav favourite favorite nothing pick"
        " choose take go give loved liked enjoyed hated disliked cared",
    ),
    _DECISION,
)
_RELATION_RANK = 4
_REMEMBER_RANK = 5

#: "Please" before a statement: read past, but kept in the entry ("Please don't use jargon.").
_PLEASE = re.compile(r"(?i)(?:please|pls)\b[\s,]*")
#: A request put as a question ("Could you always answer in metric?"): the one question that may hold a statement.
_POLITE = re.compile(
    r"(?i)(?:can|could|would|will) you(?: please)? (?=always\b|never\b|stop\b|remember\b|keep\b|bear in mind"
    r"|call me\b|answer\b|reply\b|respond\b|write\b|stick to\b|default to\b)"
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
#: A bare "don't …" or "stop …" is an instruction about answering the speaker only when it says so ("don't use
#: jargon with me", "stop adding emojis"): in a group, "don't write that down" is said to someone in the room.
_BARE = re.compile(r"(?i)(?:don'?t|do not|stop)\b")
#: A named person an instruction is about ("always reply to Dana in French"): not the speaker's to give.
_ABOUT_SOMEONE = re.compile(
    r"\b(?:answer|reply to|respond to|write to|call|tell|remind|ask|address|help|give|send|show|for|about|to|with)"
    r" ([A-Z][a-z]+)\b"
)
_POSSESSIVE = re.compile(r"\b([A-Z][a-z]+)'s\b")
#: A plan said as settled is a decision ("It's settled: I'm going to sell the car"), not an errand ("… going to bed").
_SETTLED = re.compile(
    r"(?i)(?:(?:(?:it'?s |that'?s )?(?:settled|decided)|decision made|(?:my|our) minds?(?:'s| is| are) made up"
    r"|(?:i|we)(?:'ve| have)? (?:just |finally )?(?:decided|made up (?:my|our) minds?)(?: that)?)[\s:,;\u2014\u2013-]+"
    r"(?:(?:i'?m|i am|we'?re|we are) going to|(?:i|we)(?:'ll| will))"
    r"|(?:i'?m|i am|we'?re|we are) (?:definitely|absolutely) going to)"
    r" " + ERRAND + r"(?=\w)"
)
#: The words a settled plan holds one of: only a sentence holding one is read for it.
_FIRM = frozenset(("settled", "decided", "decision", "made", "definitely", "absolutely"))
#: A plan with its decision said after it ("I'm going to sell the car, decided last night").
_DECIDED_AFTER = re.compile(
    r"(?i)(?:i'?m|i am|we'?re|we are) going to "
    + ERRAND
    + r"(?P<what>[^,;:.!]+)[,;:.!\u2014\u2013 -]+(?:i |we )?(?:decided|made up"
    r" (?:my|our) minds?)\b(?: (?:last night|yesterday|today|this morning|earlier|this week|at last|finally))?[.!]*$"
)
#: The words of which a naming of who is who holds one ("my", "our", "called", "named").
_KIN = frozenset(("my", "our", "called", "named"))
_NAME_MINE = re.compile(r"([A-Z][a-z]+)(?:'s| is) (?:my|our) " + RELATION + r"\b")
_HAVE = re.compile(r"(?i)(?:i|we)(?: have|'ve got| have got|'ve) ")
#: Where a statement may start past the sentence's first word: after a pause ("Quick thing — I'm …", "Mum asked me
#: to tell you: I'm …") or at the speaker's own "I", "my", "we" ("By day I'm a nurse").
_LATER = re.compile(r"[,;:\u2014\u2013] \w|[ (](?:[Ii]|[Mm]y|[Ww]e|[Oo]ur)\b")
#: "No nut allergy here", "no known allergies": saying there is none is no statement of one.
_NONE = re.compile(r"(?i)\bno (?:known )?(?:[\w-]+ )?(?:allerg|intoleran)")
_LABEL = re.compile(r"([A-Z][a-z]+)(?: [A-Z][a-z]+)?\s*:\s*$")


def self_statement(sentence: str) -> tuple[int, int]:
    """``(start, rank)`` of one sentence (whitespace already collapsed): where the statement starts past its small
    talk ("Oh, and btw, "), and how firm a statement about the speaker the sentence is (0: none)."""
    text, where, words = plain(sentence)
    if "no" in words and _NONE.search(text):
        return 0, 0
    low = text.lower()
    telling = not TELLING.isdisjoint(words) or " is my " in low or "'s my " in low or " is our " in low
    read = _Read(text, text.rstrip().endswith("?"), words, telling)
    start, rank = _statement_at(read, 0)
    if rank:
        return origin(where, start, len(sentence)), rank
    if not telling and STARTS.isdisjoint(words):
        return 0, 0  # no word of it can open a statement, wherever it starts
    for later in _LATER.finditer(text):
        spoken = later.group(0)[0] in " ("
        at = later.start() + 1 if spoken else later.end() - 1
        start, rank = _statement_at(read, at, spoken=spoken)
        if rank:  # what comes before must leave it the speaker's own: rarely asked, so asked last
            if SUBORDINATE.search(text, 0, at) or REFUSED.search(text, 0, at) or _label(text[:at]):
                return 0, 0  # "Dana knows I hate olives", "Dana said I'm vegan", "if I had the money I'd …"
            return origin(where, min(start, _clause(text, at)), len(sentence)), rank
    return 0, 0


def _label(before: str) -> bool:
    """Whether what precedes a statement names who said it, as a transcript does ("Dana: I'm vegan")."""
    label = _LABEL.match(before)
    return label is not None and is_name(label[1])


def _clause(text: str, at: int) -> int:
    """Where the clause holding ``at`` starts, past its small talk: an entry keeps the words that frame its statement
    ("By day I'm a nurse", "After a lot of thought I've chosen to …"), not what an earlier pause closed."""
    cut = max(text.rfind(mark, 0, at) for mark in (", ", "; ", ": ", "\u2014 ", "\u2013 ", "! ", ". "))
    begin = cut + 2 if cut >= 0 else 0
    opener = OPENER.match(text, begin)
    return opener.end() if opener else begin


def _statement_at(read: _Read, at: int, *, spoken: bool = False) -> tuple[int, int]:
    """``(start, rank)`` of the statement the sentence may hold from ``at``; ``spoken``: ``at`` is the speaker's
    "I", "my" or "we", so no small talk or request comes first."""
    start, rest = _opening(read, at, spoken)
    if rest is None:
        return start, 0
    if not read.telling and rest.split(" ", 1)[0].lower().rstrip(",.!:;") not in STARTS:
        return start, 0
    words = read.words
    settled = not _FIRM.isdisjoint(words) and (_SETTLED.match(rest) or _DECIDED_AFTER.match(rest))
    if settled:
        what = settled["what"] if "what" in settled.re.groupindex else rest[settled.end() :]
        return start, _settled(what)
    rank = _ranked(rest, words)  # anchored patterns first: most sentences fail them at once
    if rank and (REFUSED.search(rest) or is_advice(rest)):
        return start, 0
    return start, rank


def _opening(read: _Read, at: int, spoken: bool) -> tuple[int, str | None]:
    """Where a statement from ``at`` starts past its small talk, and its words past a "please" or a polite "could
    you" (None: the sentence asks, and not as a request)."""
    if spoken:
        return at, None if read.asks else read.text[at:]
    opener = OPENER.match(read.text, at)
    start = opener.end() if opener else at
    rest = read.text[start:]
    please = _PLEASE.match(rest)
    if please:
        rest = rest[please.end() :]
    polite = _POLITE.match(rest)
    if polite:
        return start, rest[polite.end() :]
    return start, None if read.asks else rest


def _ranked(rest: str, words: frozenset[str]) -> int:
    """The rank of the first kind of statement ``rest`` (a sentence past its small talk) opens with."""
    for rule in _RULES:
        if rule.needs and rule.needs.isdisjoint(words):
            continue
        match = rule.pattern.match(rest)
        if match is None or (not rule.lasting and MOMENT.search(rest)):
            continue
        if is_engineering(rest[match.end() :]) or not _fits(rule, match, rest):
            continue
        return rule.rank
    if not _KIN.isdisjoint(words) and _relation(rest):
        return _RELATION_RANK
    return _remembered(rest, words)


def _settled(what: str) -> int:
    """A settled plan (``what`` follows "I'm going to") is a firm decision unless it hedges or is of the moment."""
    if REFUSED.search(what) or MOMENT.search(what) or is_engineering(what) or is_advice(what):
        return 0
    return _DECISION.rank


def _fits(rule: _Rule, match: re.Match[str], rest: str) -> bool:
    """The checks a pattern alone cannot make: a name is a name, an instruction is about answering the speaker,
    a decision is firm."""
    if rule is _NAMING:
        if match["name"] or match["called"]:
            return is_name(match["name"] or match["called"], introduced=True)
        return match["intro"] is None or is_name(match["intro"])
    if rule is _INSTRUCTION:
        if _BARE.match(rest) and not TO_ME.search(rest, match.end()):
            return False
        return bool(ANSWERING.search(rest, match.end())) and not _about_someone(rest)
    if rule is _HOW:
        return _how_fits(match, rest)
    if rule is _DECISION:
        return is_firm_decision(rest) or bool(_CHOSEN.search(rest))
    return True


def _how_fits(match: re.Match[str], rest: str) -> bool:
    """An answer's manner is an instruction when it is a language's (not "in Slack"), the speaker's own (not "write
    to Dana in French") and standing ("reply in Spanish from now on", "respond without emojis please")."""
    language = match["language"]
    if (language and language not in LANGUAGES) or _about_someone(rest):
        return False
    return bool(match["standing"] or _STANDING.search(rest))


def _about_someone(rest: str) -> bool:
    """Whether an instruction or a "remember" names another person or what is theirs ("Dana's password")."""
    named = [m[1] for m in _ABOUT_SOMEONE.finditer(rest)] + [m[1] for m in _POSSESSIVE.finditer(rest)]
    return any(is_name(word) and word not in LANGUAGES for word in named)


def _relation(rest: str) -> bool:
    """Who is who in the speaker's life, said as a naming: "my sister is Ana", "my dog is called Biscuit", "Ana is
    my sister", "I have a puppy named Ziggy" (not "my sister Ana loves jazz": that is about Ana)."""
    match = RELATION_NAME.match(rest)
    if match and match[1].lower() in ("my", "our") and match[3].strip(" ,"):
        return is_name(match[4], introduced=match[3] != " is ")
    named = NAME_RELATION.match(rest)
    if named and named.group(0)[len(named[1]) :].startswith(" is ") and named[2].lower() in ("my", "our"):
        return is_name(named[1]) and not is_engineering(rest)
    mine = _NAME_MINE.match(rest)
    if mine:
        return is_name(mine[1])
    have = _HAVE.match(rest)
    called = CALLED.match(rest, have.end()) if have else None
    return called is not None and is_name(called[3], introduced=True)


def _remembered(rest: str, words: frozenset[str]) -> int:
    """A sentence asking to remember something about the speaker ("remember that I'm vegetarian", "keep in mind
    I'm on a budget"); never about anyone else ("remember that Dana's password is …")."""
    match = _REMEMBER.match(rest)
    if match is None:
        return 0
    said = rest[match.end() :]
    if _about_someone(said) or MOMENT.search(said) or is_engineering(said):
        return 0
    inner = _ranked(said, words)
    if inner or _SELF.match(said):
        return max(inner, _REMEMBER_RANK)
    return 0
