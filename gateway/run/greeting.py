"""What ``foldgate run`` says on the screen: what runs where, compactions and notices as they happen,
and the terminal chat's first words (the demo on a chat with no history, else where it goes on).

The wording is the user's first contact with foldgate and tests read it line by line, so it is
written in one place, apart from the wiring it describes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from gateway.events import CompressEvent, Event
from gateway.platforms.local import TerminalAdapter
from gateway.run.assembly import RunningGateway
from gateway.run.demo import overnight
from gateway.run.scratch import without_credentials
from gateway.web.chat_platform import PLATFORM as WEB_PLATFORM

if TYPE_CHECKING:
    from gateway.bots import Fleet


def announce(fleet: Fleet, out: TextIO) -> None:
    """One line per bot saying what runs where (of one bot, exactly as before ``bots:`` existed), and what
    prompt caching will do."""
    settings = fleet.settings
    if fleet.embedded is None:
        where = "Redis at " + without_credentials(settings.redis.url)
    else:
        where = f"{'embedded' if fleet.embedded.owns_server else 'shared embedded'} Redis at {fleet.embedded.url}"
    for name, running in fleet.running.items():
        bot, gateway = running.bot.settings, running.gateway
        local = bot.platforms.local
        served = [*running.adapters, *([WEB_PLATFORM] if name == fleet.front and local.enabled and local.web else [])]
        label = f"bot {name}: " if settings.bots else ""
        out.write(
            f"foldgate: {label}{', '.join(served) or 'no platform'} on {where}; model {bot.model.name}"
            f" ({bot.model.provider}, {gateway.agents.api_mode}), engine {bot.context.engine}\n"
        )
        out.write(gateway.agents.caching_status + "\n")
        for line in gateway.agents.window_lines:
            out.write(f"foldgate: {label}{line}\n")


def print_compactions(out: TextIO) -> Callable[[Event], None]:
    """An event subscriber that shows each compaction as one line, as it happens."""

    def show(event: Event) -> None:
        if isinstance(event, CompressEvent):
            out.write(
                f"\n🧹 {event.trigger} compaction of {event.chat}: {event.tokens_before:,} → {event.tokens_after:,}"
                f" tokens (summary: {event.summarizer}; session {event.session_id}"
                f"{', in place' if event.in_place else ', continued from ' + event.old_session_id})\n"
            )
            out.flush()

    return show


def print_notice(out: TextIO) -> Callable[[str], None]:
    """Where one-time operator notices (the embedded server's, the Codex autoraise) go: a line of their own."""

    def show(text: str) -> None:
        out.write(text + "\n")
        out.flush()

    return show


async def open_terminal_chat(gateway: RunningGateway, out: TextIO, chat_id: str = "terminal") -> None:
    """The terminal chat's first words: the demo on a chat with no history, else which conversation goes on."""
    chat = f"{TerminalAdapter.platform}:{chat_id}"
    sid = await gateway.store.current_session(chat)
    meta = await gateway.store.meta(chat, sid)
    if not meta.count:
        await play_demo(gateway, out, chat_id)
        return
    last = meta.last_activity_at or meta.updated_at
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(last)) if last else "unknown"
    out.write(
        f"↩️  Resumed this chat's conversation: session {sid}, {meta.count} messages, last activity {when}."
        " /new starts a fresh one, /sessions lists them all.\n"
    )
    out.flush()


async def play_demo(gateway: RunningGateway, out: TextIO, chat_id: str = "terminal") -> None:
    """Replay the bundled overnight backlog into the local chat, then ask the morning question."""
    script = overnight(chat_id)
    chat = script.question.chat
    out.write(
        f"📥 Replaying an overnight team chat: {len(script.backlog)} messages arrive while the bot only listens…\n"
    )
    for message in script.backlog:
        await gateway.runner.intake(message)
    await gateway.runner.wait_idle(timeout=120)
    meta = await gateway.store.meta(chat, await gateway.store.current_session(chat))
    window = gateway.agents.context_length(gateway.agents.default_model)
    out.write(
        f"🌙 Overnight backlog stored: {meta.count} messages, {meta.tokens:,} tokens of a {window:,}-token window"
        f" ({100 * meta.tokens / window:.0f}%).\n☀️  Morning question: {script.question.text}\n"
    )
    out.flush()
    await gateway.runner.intake(script.question)
    await gateway.runner.wait_idle(timeout=120)
