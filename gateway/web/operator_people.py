"""The operator's look at what a bot keeps about people (:mod:`gateway.store.memory`), and the way to undo it.

- ``/admin/people`` — a box to open a person by id (``?person=tg:42`` opens them at once).
- ``/admin/people/<person>`` — every entry kept about ``tg:42`` (``<platform>:<user id>``), of every scope (their
  private chats and each group), each with its number, text, how it was written, where it was learned (the chat,
  linked to its page, and the message), when, when last used and how often; ``group:<chat key>`` shows the
  group's own memory instead. A button per entry removes it, one more forgets them all
  (``POST /admin/people/<person>/forget`` with ``number`` or ``all``), answered with a redirect to the page.
- On a chat's page, the people who wrote there (the live messages' ``_user``, and whoever the chat's memory
  writes were about) each link to their page, with how many entries they have.

The operator sees every person's memory, as they see every chat: an entry is read here as it is stored, and the
page escapes it like any other text. The forget form is guarded the way every other form of the operator view
is, and by nothing more: the admin cookie is ``SameSite=Strict`` (another site's form is sent without it, and is
refused for want of the token), and :func:`gateway.web.security.guard` refuses a POST whose ``Sec-Fetch-Site`` or
``Origin`` says it came from another site. There is no per-form token.

A removal here goes straight to the store: it is not told to the chat's activity or to ``/metrics``, since
``memory:write`` has no source for the operator (and no chat of its own to be recorded in).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from gateway.events import Event, MemoryAction, MemoryWriteEvent
from gateway.store.memory import PRIVATE, MemoryEntry
from gateway.web.operated import BotPage, OperatedBot, OperatedBots, chat_link, render_page
from gateway.web.pages import render
from gateway.web.security import Handler

#: People a chat's page links to at most, those who wrote last first.
PEOPLE_SHOWN = 30
#: How a group's own memory is named where a person's id goes.
GROUP = "group:"


def person_link(person: str) -> str:
    """The page of a person's memory (``group:<chat key>`` for a group's own)."""
    return "/admin/people/" + quote(person, safe="")


@dataclass(frozen=True)
class Whose:
    """Whose memory a page shows: a person's, every scope of it, or a group's own."""

    #: As the operator named it: ``tg:42``, or ``group:tg:-100…``.
    shown: str
    #: The store's person: the id, or ``""`` for a group's own memory.
    person: str
    #: The group's scope for a group's own memory; None for a person (every scope).
    scope: str | None

    @property
    def group(self) -> bool:
        return not self.person


def whose(named: str) -> Whose | None:
    """Whose memory ``named`` means; None when it cannot name anyone (empty, or with the braces a key refuses)."""
    named = named.strip()
    if not named or "{" in named or "}" in named or named == GROUP:
        return None
    if named.startswith(GROUP):
        return Whose(named, "", named)
    return Whose(named, named, None)


@dataclass(frozen=True)
class PersonLink:
    """Someone a chat's page links to: a person (or the group's own memory) and how many entries they have."""

    person: str
    kept: int
    label: str = ""


def people_who_wrote(messages: Sequence[Mapping[str, Any]], events: Sequence[Event]) -> list[str]:
    """Who wrote in a chat, the latest first: its live messages' senders, then whom its memory writes were about."""
    seen: dict[str, None] = {}
    for message in reversed(messages):
        user = message.get("_user")
        if isinstance(user, str) and whose(user) is not None:
            seen.setdefault(user)
    for event in reversed(events):
        if isinstance(event, MemoryWriteEvent) and event.person and whose(event.person) is not None:
            seen.setdefault(event.person)
    return list(seen)[:PEOPLE_SHOWN]


async def chat_people(
    bot: OperatedBot, chat: str, messages: Sequence[Mapping[str, Any]], events: Sequence[Event]
) -> list[PersonLink]:
    """The links a chat's page shows: each person who wrote there, and the chat's own memory when it has some."""
    memory = bot.memory
    people = people_who_wrote(messages, events)
    if memory is None:
        return [PersonLink(person, 0) for person in people]
    links = [PersonLink(person, await memory.count(person)) for person in people]
    group = GROUP + chat
    kept = len(await memory.entries("", group)) if whose(group) is not None else 0
    if kept:
        links.append(PersonLink(group, kept, "this group's own memory"))
    return links


@dataclass(frozen=True)
class EntryRow:
    """One entry as the page lists it."""

    entry: MemoryEntry
    #: The group chat it applies in ("" for the person's private chats).
    group_chat: str


def _rows(entries: Sequence[MemoryEntry]) -> list[EntryRow]:
    return [EntryRow(e, "" if e.scope == PRIVATE else e.scope.removeprefix(GROUP)) for e in entries]


def _bot_query(bots: OperatedBots, bot: OperatedBot, **more: str) -> str:
    """``?bot=…`` when the deployment has several bots, with ``more``; "" when there is nothing to ask."""
    query = ({"bot": bot.name} if bots.several else {}) | more
    return "?" + urlencode(query, quote_via=quote) if query else ""


def _context(bots: OperatedBots, bot: OperatedBot, typed: str = "", removed: str = "") -> dict[str, Any]:
    """What every people page shows besides whose memory it is."""
    return {
        "typed": typed.strip(),
        "removed": removed if removed.isdigit() else "",
        "person_link": person_link,
        "chat_link": chat_link,
        "forget_query": _bot_query(bots, bot),
        "kept_here": bot.memory is not None,
        "target": None,
        "rows": [],
        "problem": "",
    }


async def _person_page(bots: OperatedBots, bot: OperatedBot, named: str, removed: str = "") -> web.Response:
    """The page of ``named``'s memory; a name that names nobody is refused on the page, saying why."""
    context = _context(bots, bot, named, removed)
    target = whose(named)
    if target is None:
        context["problem"] = "Name a person by their id (tg:42, dc:…, web:…), or a group as group:<chat key>."
        return render_page("operator_people.html", bots, bot, status=400, **context)
    entries = await bot.memory.entries(target.person, target.scope) if bot.memory else []
    return render_page("operator_people.html", bots, bot, **(context | {"target": target, "rows": _rows(entries)}))


async def people(request: web.Request, bots: OperatedBots, bot: OperatedBot) -> web.Response:
    """The box to open a person; ``?person=`` opens them."""
    named = request.query.get("person", "")
    if named.strip():
        return await _person_page(bots, bot, named)
    return render_page("operator_people.html", bots, bot, **_context(bots, bot))


async def person(request: web.Request, bots: OperatedBots, bot: OperatedBot) -> web.Response:
    return await _person_page(bots, bot, request.match_info["person"], request.query.get("removed", ""))


async def forget(request: web.Request, bots: OperatedBots, bot: OperatedBot) -> web.Response:
    """Remove entry ``number`` of the person, or ``all`` of them; back to their page, saying how many went."""
    named = request.match_info["person"]
    target = whose(named)
    form = await request.post()
    number = str(form.get("number") or "").strip().removeprefix("#")
    if target is None or bot.memory is None or not (form.get("all") or number.isdigit()):
        return render("refused.html", status=400, reason="Say which entry to remove (number), or all of them (all).")
    if form.get("all"):
        removed = await bot.memory.forget_all(target.person, target.scope)
    else:
        found = await bot.memory.remove(target.person, int(number), target.scope or PRIVATE)
        removed = 0 if found is None else 1
    if removed and bot.events is not None:
        action: MemoryAction = "forget" if form.get("all") else "remove"
        written = MemoryWriteEvent(
            platform="admin", chat="", person=target.person, source="operator", action=action, entries=removed
        )
        await bot.events.emit(written)
    raise web.HTTPSeeOther(person_link(target.shown) + _bot_query(bots, bot, removed=str(removed)))


def add_people_routes(app: web.Application, of_one_bot: Callable[[BotPage], Handler]) -> None:
    """The people pages, each of the bot the request chose (``of_one_bot``) and behind the operator's gate."""
    app.router.add_get("/admin/people", of_one_bot(people))
    app.router.add_get("/admin/people/{person}", of_one_bot(person))
    app.router.add_post("/admin/people/{person}/forget", of_one_bot(forget))
