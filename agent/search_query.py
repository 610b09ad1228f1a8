"""What a search query asks for: keywords, identifiers and quoted phrases as weighted terms, or a ``/regex/``.

:mod:`agent.search` ranks messages by these terms. The parsing decides what counts as an
identifier (matched exactly, weighed above ordinary words), how an ordinary word is stemmed so
``decided`` also finds ``decision``, and which neighbouring terms form a pair worth a bonus
when they stand together in a text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Identifiers (SHAs, paths, numbers, codes) count this many times an ordinary word.
_IDENTIFIER_WEIGHT = 4.0
#: Quoted phrases count this many times an ordinary word.
_PHRASE_WEIGHT = 3.0

#: Words too common to search for: a question's grammar, not what it asks about.
STOPWORDS = frozenset(
    [
        "a",
        "am",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "about",
        "again",
        "any",
        "some",
        "just",
        "than",
        "too",
        "very",
        "should",
        "tell",
        "remind",
        "remember",
        "said",
        "say",
        "says",
        "she",
    ]
)
#: Words by which a question speaks of the person asking it ("what am I allergic to?", "my sister's name?").
_FIRST_PERSON = frozenset(["i", "me", "my", "mine", "myself", "i'm", "im", "i've", "i'd", "i'll"])
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_REGEX_QUERY = re.compile(r"/(.+)/([imsx]*)", flags=re.DOTALL)
_QUERY_TOKEN = re.compile(r'"([^"]+)"|(\S+)')
_EDGE_PUNCTUATION = ".,;:!?()[]{}<>'\"`*"
_HEX = re.compile(r"[0-9a-f]{7,40}")
_NUMBER_REF = re.compile(r"#?\d+")
_SUFFIXES = ("ing", "ed", "es", "s", "e")


class SearchError(ValueError):
    """A query that cannot be run (e.g. an invalid ``/regex/``); the message says why."""


@dataclass(frozen=True, slots=True)
class Term:
    """One query term: the literal that must occur (lowercase) and the regex that confirms a match."""

    literal: str
    pattern: re.Pattern[str]
    weight: float


def _stem(word: str) -> str:
    """Strip one common English suffix so ``decided``/``decision``/``decide`` share a prefix."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def _is_identifier(token: str) -> bool:
    """Tokens a person copies rather than types: anything with digits or inner punctuation."""
    return (
        any(char.isdigit() for char in token)
        or any(char in token for char in "/._-:#@=\\$")
        or (token.isupper() and len(token) >= 3)
    )


def _identifier_term(token: str) -> Term:
    lowered = token.lower()
    if _HEX.fullmatch(lowered) and any(char.isalpha() for char in lowered):
        # A short SHA also finds the full 40-character one it abbreviates.
        pattern = re.compile(rf"(?<![0-9a-z]){lowered}[0-9a-f]*(?![0-9a-z])")
        return Term(lowered, pattern, _IDENTIFIER_WEIGHT)
    if _NUMBER_REF.fullmatch(lowered):
        # "#4821", "PR 4821" and "pull/4821" name the same thing; "4821ms", "14821" and "1.4821" do not.
        digits = lowered.lstrip("#")
        return Term(digits, re.compile(rf"(?<![\w.#])#?{digits}(?![\w])"), _IDENTIFIER_WEIGHT)
    boundary_before = r"(?<![\w])" if lowered[0].isalnum() or lowered[0] == "_" else ""
    boundary_after = r"(?![\w])" if lowered[-1].isalnum() or lowered[-1] == "_" else ""
    return Term(lowered, re.compile(boundary_before + re.escape(lowered) + boundary_after), _IDENTIFIER_WEIGHT)


def _word_term(word: str) -> Term:
    stem = _stem(word.lower())
    # Underscores separate words here, so "retry" finds "apply_retry_backoff".
    return Term(stem, re.compile(rf"(?<![a-z0-9]){re.escape(stem)}"), 1.0)


def _phrase_term(phrase: str) -> Term:
    lowered = " ".join(phrase.lower().split())
    return Term(lowered, re.compile(re.escape(lowered)), _PHRASE_WEIGHT)


@dataclass(frozen=True, slots=True)
class Query:
    """Parsed keywords: distinct terms, neighbouring pairs (by term index), and the whole query as a phrase."""

    terms: list[Term]
    pairs: list[tuple[re.Pattern[str], int, int]]
    phrase: str | None


def _pair_pattern(first: Term, second: Term) -> re.Pattern[str]:
    """Two query terms next to each other in the text: "checkout grace", "checkout_grace", "checkout-grace"."""

    def core(term: Term) -> str:
        return re.escape(term.literal) + ("[a-z0-9]*" if term.weight == 1.0 else "")

    return re.compile(rf"(?<![a-z0-9]){core(first)}[\s_\-/.:']{{1,3}}{core(second)}")


def parse_query(query: str) -> Query:
    """The keywords of ``query`` as terms (stopwords and one-letter words dropped, repeats kept once), the pairs
    of terms next to each other in it, and (from two words on) all its words as one phrase."""
    terms: dict[str, Term] = {}
    order: list[str] = []  # term keys in query order, for neighbouring pairs
    words: list[str] = []
    for quoted, bare in _QUERY_TOKEN.findall(query):
        if quoted:
            if quoted.strip():
                term = _phrase_term(quoted)
                terms.setdefault(term.pattern.pattern, term)
                order.append("")  # a phrase breaks the chain of neighbours
                words.extend(quoted.split())
            continue
        token = bare.strip(_EDGE_PUNCTUATION) if not bare.startswith("#") else bare.rstrip(_EDGE_PUNCTUATION)
        if not token:
            continue
        words.append(token)
        if _is_identifier(token):
            term = _identifier_term(token)
        elif token.lower() in STOPWORDS or len(token) < 2:
            continue
        else:
            term = _word_term(token)
        terms.setdefault(term.pattern.pattern, term)
        order.append(term.pattern.pattern)
    keys = list(terms)
    pairs = []
    for first, second in zip(order, order[1:]):
        if first and second and first != second:
            pairs.append((_pair_pattern(terms[first], terms[second]), keys.index(first), keys.index(second)))
    phrase = " ".join(word.lower() for word in words) if len(words) >= 2 else None
    return Query(list(terms.values()), pairs, phrase)


def about_asker(query: str) -> bool:
    """Whether ``query`` asks about the person asking it: it says "I", "me", "my" (or "mine", "myself", "I'm"…).
    A ``/regex/`` asks for text, never about anyone."""
    if _REGEX_QUERY.fullmatch(query.strip()):
        return False
    return any(word in _FIRST_PERSON for word in _WORD.findall(query.lower().replace("\u2019", "'")))


def parse_regex(query: str) -> re.Pattern[str] | None:
    """``/pattern/`` or ``/pattern/i`` → compiled regex; anything else → None."""
    stripped = query.strip()
    match = _REGEX_QUERY.fullmatch(stripped)
    if not match:
        return None
    flags = 0
    for letter in match.group(2):
        flags |= {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}[letter]
    try:
        return re.compile(match.group(1), flags)
    except re.error as error:
        raise SearchError(f"invalid regex {match.group(1)!r}: {error}") from None
