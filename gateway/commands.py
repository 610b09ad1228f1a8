"""Chat commands: ``/help``, ``/compress [focus]``, ``/model [name]``, ``/new`` (``/reset``), ``/sessions``,
``/resume N``, ``/usage``, ``/status``, ``/stop``.

Each command runs inside the chat's turn (holding its lock), so it sees and changes the
session exactly like a message would, and its reply goes out like any other. A message is a
command when its first word has Telegram's command shape (``/name`` or ``/name@bot``); an
unknown one is answered as such and never reaches the model, while ``/usr/bin is missing``
is ordinary text.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agent import pricing
from agent.codex_chat import CodexThreadEngine, thread_of
from agent.llm.client import lists_model
from agent.llm.errors import ProviderError, plain_reason
from agent.metering import BudgetExceeded
from agent.models import UnknownAlias, api_model_id, split_large_alias
from agent.prompt_caching import CachingPlan
from gateway.access.budgets import ChatMeter, budget_amount, reset_time, subjects
from gateway.access.roles import named_person, person_of
from gateway.agents import AgentBuilder
from gateway.config.access import period_bounds
from gateway.events import CompressEvent
from gateway.platforms.base import IncomingMessage
from gateway.session_source import ChatHistory, Conversation, conversations, outline
from gateway.store import UnknownSession, VersionConflict
from gateway.worker import hygiene
from gateway.worker.chat_turn import ChatTurn, CommandHost

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from agent.context_engine import ContextEngine

Command = Callable[[ChatTurn, str], Awaitable[str]]


def _engine(turn: ChatTurn, model: str) -> ContextEngine:
    """The chat's context engine for ``model``, with its saved state and its archive; its summarizer's calls count
    against the budgets of the person who asked (and the chat)."""
    runner = turn.runner
    meter = ChatMeter(runner.spending, runner.budgets, turn.message, cache_ttl=runner.cache_ttl, notes=[])
    return runner.agents.build_engine(
        model,
        turn.meta.engine_state,
        ChatHistory(runner.store, turn.chat, turn.session_id),
        meter if meter.active else None,
    )


def _percent(tokens: int, window: int) -> str:
    return f"{100 * tokens / window:.1f}%" if window else "?"


async def compress(turn: ChatTurn, focus: str) -> str:
    """Compact now, favouring ``focus`` in the summary."""
    runner = turn.runner
    model = turn.meta.model or runner.agents.default_model
    if turn.meta.count < 2:
        return "Nothing to compress yet."
    engine = _engine(turn, model)
    if isinstance(engine, CodexThreadEngine):
        return await _compress_codex_thread(turn, engine)
    before_tokens, before_count = turn.meta.tokens, turn.meta.count
    try:
        compacted = await runner.compact(turn, engine, trigger="manual", force=True, focus=focus or None)
    except BudgetExceeded as over:
        return over.notice
    if compacted is None:
        return "Nothing to compress: the conversation is already as small as compaction makes it."
    after = turn.meta
    stats = engine.last_compaction
    by = stats.summarizer if stats is not None else ""
    return (
        f"Compressed: {before_count} → {after.count} messages, {before_tokens:,} → {after.tokens:,} tokens"
        f" (summary by {by}). Everything folded away stays searchable."
    )


async def _compress_codex_thread(turn: ChatTurn, engine: CodexThreadEngine) -> str:
    """Ask the codex app-server to compact the chat's thread, wait for it, and record the boundary.

    The transcript here is never rewritten on this route: the commit keeps every message
    where it is and only records that a compaction happened (count, reported size).
    """
    runner = turn.runner
    messages = await runner.store.active(turn.chat, turn.session_id)
    thread = thread_of(messages)
    if thread is None:
        return "Nothing to compress yet: this chat has no codex thread."
    done = await engine.compact_thread(thread, trigger="manual")
    await runner.store.commit_compaction(
        turn.chat,
        turn.session_id,
        messages,
        lock=turn.lock,
        in_place=True,
        compaction_id=f"{turn.entry_id}:codex-thread",
        meta={
            "engine_state": engine.export_state(),
            "last_prompt_tokens": done.tokens_after or None,
            "tokens_at_report": turn.meta.tokens,
        },
    )
    turn.meta = await runner.store.meta(turn.chat, turn.session_id)
    await runner.events.emit(
        CompressEvent(
            platform=turn.message.platform,
            chat=turn.chat,
            session_id=turn.session_id,
            old_session_id="",
            in_place=True,
            compression_count=engine.compression_count,
            trigger="manual",
            tokens_before=done.tokens_before,
            tokens_after=done.tokens_after,
            summarizer="codex app-server",
        )
    )
    return (
        f"Compacted the codex thread: {done.tokens_before:,} → {done.tokens_after:,} tokens of context"
        " (the app-server's own compaction). The conversation here is unchanged."
    )


def _cold_cache_warning(caching: CachingPlan, tokens: int, new_model: str) -> str:
    """What a switch costs: the provider's cache is per model, so the next request reads everything uncached.

    ``caching`` is the new model's caching plan: with breakpoints, that request also writes a new cache.
    """
    text = (
        " ⚠️ The prompt cache belongs to the model: "
        f"the next request re-reads this conversation's {tokens:,} tokens uncached"
    )
    price = pricing.price_for(new_model)
    if price is not None and tokens:
        full = pricing.cost({"prompt_tokens": tokens}, new_model)
        text += f" (≈{full} at {new_model}'s input price)"
    if caching.enabled:
        text += " and writes a new cache"
    return text + "; later replies are cheap again once it is warm."


@runtime_checkable
class ListsModels(Protocol):
    """A chat model that can say which models its provider serves (the chat completions client, the local
    demo model); the Responses and codex routes cannot, and ``/model`` then switches unchecked."""

    async def list_models(self) -> list[str]: ...


async def _provider_models(agents: AgentBuilder) -> tuple[list[str] | None, str]:
    """The models the configured provider serves, or ``(None, why not)`` when that cannot be known."""
    if agents.api_mode == "codex_app_server":
        return None, "the codex app-server route has no model list here"
    if not isinstance(agents.chat_model, ListsModels):
        return None, "this route offers no model list"
    try:
        return list(await agents.chat_model.list_models()), ""
    except ProviderError as error:  # any failure only means the name stays unchecked
        # The provider's own text can echo the key or name an internal address: the chat gets plain words.
        log.warning("listing the provider's models failed: %s", error)
        return None, f"the provider {plain_reason(error)}"
    except Exception as error:
        log.warning("listing the provider's models failed: %s: %s", type(error).__name__, error)
        return None, f"the model list could not be read ({type(error).__name__})"


async def model(turn: ChatTurn, name: str) -> str:
    """Show the model, or switch this chat to another one the provider serves (a cold prompt cache: it costs
    more at first)."""
    runner = turn.runner
    current = turn.meta.model or runner.agents.default_model
    window = runner.agents.context_length(current)
    if not name:
        engine = _engine(turn, current)
        return (
            f"Model: {current} — window {window:,} tokens, compaction at {engine.threshold:.0%}"
            f" ({engine.threshold_tokens:,} tokens), hygiene at 85%."
        )
    try:
        split_large_alias(name)
    except UnknownAlias as error:
        return f"⚠️ {error}"
    if name == current:
        return f"Already on {current}."
    provider = runner.agents.provider or "the provider"
    served, why = await _provider_models(runner.agents)
    if served is not None and not lists_model(served, api_model_id(name)):
        close = difflib.get_close_matches(api_model_id(name), served, n=5, cutoff=0.4)
        hint = (
            f" Close names it serves: {', '.join(close)}."
            if close
            else (f" It serves: {', '.join(served[:10])}{' …' if len(served) > 10 else ''}." if served else "")
        )
        return f"⚠️ {provider} does not serve {name}; staying on {current}.{hint}"
    await runner.store.update_meta(turn.chat, turn.session_id, lock=turn.lock, model=name)
    engine = _engine(turn, name)
    tokens, _source = hygiene.estimate_session_tokens(turn.meta)
    text = (
        f"Switched {current} → {name} (window {runner.agents.context_length(name):,} tokens, compaction at"
        f" {engine.threshold:.0%})."
    )
    if provider not in UNBILLED_PROVIDERS:
        text += _cold_cache_warning(runner.agents.caching_plan(name), tokens, name)
    if served is None:
        text += f" ⚠️ Could not verify that {provider} serves {name} ({why}); the next reply will tell."
    return text


async def new(turn: ChatTurn, _arg: str) -> str:
    """Start a fresh conversation; the old one stays stored, searchable and listed by /sessions."""
    old = turn.session_id
    sid = await turn.runner.store.new_session(turn.chat, lock=turn.lock)
    turn.session_id = sid
    turn.meta = await turn.runner.store.meta(turn.chat, sid)
    return (
        f"Started a new conversation (session {sid}). The previous one ({old}) is kept:"
        " /sessions lists it, /resume goes back."
    )


#: Conversations ``/sessions`` shows at most (the newest); ``/resume`` reaches older ones by number too.
MAX_LISTED = 20


async def _newest_first(turn: ChatTurn) -> list[Conversation]:
    return list(reversed(await conversations(turn.runner.store, turn.chat, turn.session_id)))


def _size(size: int) -> str:
    return (
        f"{size / 1_048_576:.1f} MB" if size >= 1_048_576 else f"{size / 1024:.1f} KB" if size >= 1024 else f"{size} B"
    )


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, length in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= length:
            return f"{int(seconds // length)} {unit} ago"
    return "just now"


async def sessions(turn: ChatTurn, _arg: str) -> str:
    """List this chat's conversations, newest first, numbered for /resume."""
    store = turn.runner.store
    listed = await _newest_first(turn)
    now = time.time()
    lines = ["Conversations in this chat, newest first (▶ is the current one):"]
    for number, conversation in enumerate(listed[:MAX_LISTED], start=1):
        about = await outline(store, turn.chat, conversation)
        mark = "▶" if turn.session_id in conversation.sessions else " "
        when = datetime.fromtimestamp(about.last_activity_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
        first = f"“{about.first_line}”" if about.first_line else "(nothing said yet)"
        lines.append(
            f"{mark} {number}. {first} — {about.live + about.archived} messages ({about.live} live,"
            f" {about.archived} archived), {_size(about.size_bytes)}; last active {when}"
            f" ({_ago(now - about.last_activity_at)}); session {conversation.head}"
        )
    if len(listed) > MAX_LISTED:
        lines.append(f"… and {len(listed) - MAX_LISTED} older ones (/resume {MAX_LISTED + 1} to {len(listed)}).")
    lines.append("/resume N continues conversation N; the one you leave stays kept and listed.")
    return "\n".join(lines)


async def resume(turn: ChatTurn, which: str) -> str:
    """Continue conversation N of /sessions; the current one stays kept and listed."""
    listed = await _newest_first(turn)
    which = which.strip()
    chosen: tuple[int, Conversation] | None = None
    if which.isdigit() and 1 <= int(which) <= len(listed):
        chosen = (int(which), listed[int(which) - 1])
    else:  # a session id works too (as /sessions and /status print them)
        chosen = next(((n, c) for n, c in enumerate(listed, start=1) if which and which in c.sessions), None)
    if chosen is None:
        return (
            f"⚠️ /resume needs a number from /sessions (1 to {len(listed)})."
            if which
            else "Which one? /sessions lists this chat's conversations; /resume N continues number N."
        )
    number, conversation = chosen
    if turn.session_id in conversation.sessions:
        return f"Conversation {number} (session {conversation.head}) is the current one already."
    old = turn.session_id
    store = turn.runner.store
    try:
        sid = await store.switch_session(turn.chat, conversation.head, lock=turn.lock)
    except (UnknownSession, VersionConflict) as error:
        return f"⚠️ Could not resume conversation {number}: {error}"
    turn.session_id = sid
    turn.meta = await store.meta(turn.chat, sid)
    about = await outline(store, turn.chat, conversation)
    first = f" “{about.first_line}”" if about.first_line else ""
    return (
        f"Resumed conversation {number}{first} (session {sid}, {about.live + about.archived} messages)."
        f" The one you left ({old}) is kept: /sessions lists it."
    )


#: Routes whose tokens are not billed per token (a subscription, or nothing at all).
UNBILLED_PROVIDERS = {
    "local": "the local demo model is free",
    "openai-codex": "a ChatGPT subscription, not per-token billing",
}


def _money_line(agents: AgentBuilder, model: str, totals: dict) -> str:
    """Money spent on the session and what prompt caching saved, priced for the route ``agents`` sends on."""
    if agents.provider in UNBILLED_PROVIDERS:
        return f"Cost: not billed per token ({UNBILLED_PROVIDERS[agents.provider]})"
    if pricing.price_for(model) is None:
        return f"Cost: no price known for {model}"
    spent = pricing.cost(totals, model, agents.settings.prompt_caching.cache_ttl)
    without = pricing.uncached_cost(totals, model)
    saved = without - spent
    share = f" ({saved.ratio(without):.0%} less than without caching)" if saved.amount > 0 else ""
    return f"Cost: {spent} spent, priced as {pricing.price_key(model)}; caching saved {saved}{share}"


async def usage(turn: ChatTurn, arg: str) -> str:
    """Context size, compactions, token usage (cache reads and writes), money spent and saved by caching, and what
    is left of the budgets (an admin may name anyone: /usage tg:123)."""
    if arg.strip():
        if not turn.runner.roles.is_admin(person_of(turn.message)):
            return "Only an admin may see someone else's usage."
        person = named_person(arg, turn.message.platform)
        if person is None:
            return "Name the person: their id (123456789, or tg:123456789) or their mention."
        platform, _, user_id = person.partition(":")
        shown = turn.message.model_copy(update={"platform": platform, "user_id": user_id})
        return "\n".join(await budget_lines(turn.runner, shown, person)) or "No budget applies (access.budgets)."
    meta = turn.meta
    runner = turn.runner
    model = meta.model or runner.agents.default_model
    window = runner.agents.context_length(model)
    tokens, source = hygiene.estimate_session_tokens(meta)
    totals = meta.usage_totals
    compactions = f"Compactions: {meta.compaction_count}"
    native = (meta.engine_state or {}).get("native_compactions")
    if native:
        compactions += (
            f" (codex thread: {native.get('manual', 0)} by /compress, {native.get('gateway', 0)} at foldgate's"
            f" threshold, {native.get('app_server', 0)} by the app-server itself)"
        )
    lines = [
        f"Context: {tokens:,} / {window:,} tokens ({_percent(tokens, window)}; {source}), {meta.count} messages",
        compactions,
        f"Turns: {totals.get('turns', 0)}; prompt tokens {totals.get('prompt_tokens', 0):,},"
        f" completion tokens {totals.get('completion_tokens', 0):,}",
        f"Cache: read {totals.get('cache_read_tokens', 0):,} tokens,"
        f" written {totals.get('cache_write_tokens', 0):,} tokens",
        _money_line(runner.agents, model, totals),
        *await budget_lines(runner, turn.message, "you"),
    ]
    return "\n".join(lines)


async def budget_lines(runner: CommandHost, message: IncomingMessage, person: str) -> list[str]:
    """What the sender of ``message`` (and its chat) spent this period, against each budget that applies."""
    lines = []
    now = datetime.now(UTC)
    for subject, _who, limit in subjects(message, runner.budgets):
        period, ends = period_bounds(now, limit.period, runner.budgets.timezone)
        spent = await runner.spending.spent(subject, period)
        owner = person if subject.startswith("user:") else "this chat"
        lines.append(
            f"Budget ({owner}, {limit.period}): {budget_amount(limit, spent.usd, spent.tokens)}; "
            f"resets {reset_time(ends)}"
        )
    return lines


async def status(turn: ChatTurn, _arg: str) -> str:
    """Where this chat stands and how the gateway is doing."""
    runner = turn.runner
    meta = turn.meta
    uptime = int(time.time() - runner.started_at)
    pending = await runner.inbox.pending(turn.chat)
    return "\n".join(
        [
            f"Session {turn.session_id}"
            f" ({'continues ' + meta.parent_session_id if meta.parent_session_id else 'root'})",
            f"Model {meta.model or runner.agents.default_model}",
            f"Messages {meta.count}, compactions {meta.compaction_count}, pending in inbox {max(0, pending - 1)}",
            f"Worker {runner.worker_id}, up {uptime // 3600}h{uptime % 3600 // 60:02d}m,"
            f" chats running here {runner.busy_chats}",
        ]
    )


async def stop(turn: ChatTurn, _arg: str) -> str:
    """End the reply being written. The stop itself happens as the message arrives (the running turn
    honours it and clears it); by the time this command's own turn comes, only a leftover is cleared."""
    if await turn.runner.inbox.clear_stop(turn.chat):
        return "Nothing was being written; there is nothing to stop."
    return "⏹ Stopped. What was written so far is kept; your next message is answered as usual."


def _admin_target(turn: ChatTurn, arg: str) -> tuple[str | None, str]:
    """The person an admin's command names (None with the reply that says why not)."""
    roles = turn.runner.roles
    if not roles.is_admin(person_of(turn.message)):
        return None, "Only an admin may change who I answer (access.admins)."
    person = named_person(arg, turn.message.platform)
    if person is None:
        return None, (
            "Name the person by their numeric id (123456789, or tg:123456789) or a Discord mention: a "
            "username can change hands."
        )
    return person, ""


async def allow(turn: ChatTurn, arg: str) -> str:
    """Answer this person from now on (admins only; with anyone allowed, only they are answered)."""
    person, refusal = _admin_target(turn, arg)
    if person is None:
        return refusal
    roles = turn.runner.roles
    if person in roles.settings.blocked:
        return f"{person} is blocked in the configuration (access.blocked): only the file can change that."
    first = not roles.settings.allowed and not (await roles.lists.read()).allowed
    await roles.lists.allow(person)
    note = (
        " From now on I answer only the people allowed (and the admins): /allow the others you want answered."
        if first
        else ""
    )
    return f"✅ {person} is allowed: I answer them from their next message.{note}"


async def block(turn: ChatTurn, arg: str) -> str:
    """Stop answering this person; their messages are still kept (admins only)."""
    person, refusal = _admin_target(turn, arg)
    if person is None:
        return refusal
    if turn.runner.roles.is_admin(person):
        return f"{person} is an admin (access.admins): an admin cannot be blocked."
    await turn.runner.roles.lists.block(person)
    return f"⛔ {person} is blocked: their messages are kept and not answered."


async def unblock(turn: ChatTurn, arg: str) -> str:
    """Answer a blocked person again (admins only)."""
    person, refusal = _admin_target(turn, arg)
    if person is None:
        return refusal
    if person in turn.runner.roles.settings.blocked:
        return f"{person} is blocked in the configuration (access.blocked): only the file can change that."
    if not await turn.runner.roles.lists.unblock(person):
        return f"{person} was not blocked."
    return f"✅ {person} is unblocked: I answer them from their next message."


async def answer(turn: ChatTurn, arg: str) -> str:
    """Answer a question the bot asked before running a tool (the buttons do the same).

    An answer that reaches a waiting turn is taken as it arrives and never queued; one that comes here found
    nothing it could answer."""
    approval_id = arg.split()[0] if arg else "?"
    return (
        f"No question with id {approval_id} is waiting for your answer: it was answered already, its time ran "
        "out, or someone else was asked."
    )


async def show_help(turn: ChatTurn, _arg: str) -> str:
    """List the commands and what each one does."""
    lines = ["Commands:"]
    for command, names in _by_command().items():
        usage = f"/{names[0]}" + (f" {ARGUMENTS[names[0]]}" if names[0] in ARGUMENTS else "")
        aliases = "".join(f" (/{alias})" for alias in names[1:])
        lines.append(f"{usage}{aliases} — {summary(command)}")
    return "\n".join(lines)


COMMANDS: dict[str, Command] = {
    "help": show_help,
    "compress": compress,
    "model": model,
    "new": new,
    "reset": new,
    "sessions": sessions,
    "resume": resume,
    "usage": usage,
    "status": status,
    "stop": stop,
    "approve": answer,
    "refuse": answer,
    "allow": allow,
    "block": block,
    "unblock": unblock,
}

#: The commands that answer a question the bot asked (``ask``): taken by the intake as they arrive.
ANSWERS = frozenset({"approve", "refuse"})

#: What a command takes after its name, as ``/help`` shows it (``[...]`` when it may be left out).
ARGUMENTS = {
    "compress": "[focus]",
    "model": "[name]",
    "resume": "N",
    "approve": "ID",
    "allow": "PERSON",
    "block": "PERSON",
    "unblock": "PERSON",
    "usage": "[PERSON]",
}

#: Telegram's command syntax: a letter, then up to 31 letters, digits or underscores, maybe ``@botname``.
_COMMAND_WORD = re.compile(r"/([A-Za-z][A-Za-z0-9_]{0,31})(?:@\w+)?")


def _by_command() -> dict[Command, list[str]]:
    """Each command with its names, the first being the one it is listed under (aliases after it)."""
    names: dict[Command, list[str]] = {}
    for name, command in COMMANDS.items():
        names.setdefault(command, []).append(name)
    return names


def summary(command: Command) -> str:
    """The first sentence of a command's docstring: what ``/help`` says it does."""
    doc = inspect.getdoc(command) or ""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split()).replace("``", "")
    match = re.match(r"(.+?[.!?])(?:\s|$)", paragraph)
    return match[1] if match else paragraph


def parse(text: str) -> tuple[str, str] | None:
    """``("name", "argument")`` when the text is a command, known or not (``/cmd@botname arg`` too), else None.

    Only a first word of Telegram's command shape counts: ``/usr/bin is missing`` is text.
    """
    words = text.split(maxsplit=1)
    match = _COMMAND_WORD.fullmatch(words[0]) if words else None
    if match is None:
        return None
    return match[1].lower(), words[1].strip() if len(words) > 1 else ""


def unknown(name: str) -> str:
    """The answer to a command foldgate does not have."""
    return f"Unknown command /{name} — /help lists the commands."


async def handle_command(turn: ChatTurn) -> str | None:
    """Run the command in the turn's message; None when the message is not a command.

    A message not addressed to the bot (``respond=False``: group chatter, another bot's
    ``/cmd@other_bot``) is never a command here: it is recorded like any other line.
    """
    if not turn.message.respond:
        return None
    parsed = parse(turn.message.text.strip())
    if parsed is None:
        return None
    name, argument = parsed
    command = COMMANDS.get(name)
    if command is None:
        return unknown(name)
    return await command(turn, argument)
