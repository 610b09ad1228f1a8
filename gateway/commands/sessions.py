"""The chat's conversations and where it stands: ``/new`` (``/reset``), ``/sessions``, ``/resume N``,
``/status`` and ``/stop``."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from gateway.commands.context import CommandContext
from gateway.session_source import Conversation, conversations, outline
from gateway.store import UnknownSession, VersionConflict
from gateway.worker.chat_turn import ChatTurn

#: Conversations ``/sessions`` shows at most (the newest); ``/resume`` reaches older ones by number too.
MAX_LISTED = 20


async def new(context: CommandContext, turn: ChatTurn, _arg: str) -> str:
    """Start a fresh conversation; the old one stays stored, searchable and listed by /sessions."""
    old = turn.session_id
    sid = await context.store.new_session(turn.chat, lock=turn.lock)
    turn.session_id = sid
    turn.meta = await context.store.meta(turn.chat, sid)
    return (
        f"Started a new conversation (session {sid}). The previous one ({old}) is kept:"
        " /sessions lists it, /resume goes back."
    )


async def _newest_first(context: CommandContext, turn: ChatTurn) -> list[Conversation]:
    return list(reversed(await conversations(context.store, turn.chat, turn.session_id)))


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


async def sessions(context: CommandContext, turn: ChatTurn, _arg: str) -> str:
    """List this chat's conversations, newest first, numbered for /resume."""
    store = context.store
    listed = await _newest_first(context, turn)
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


async def resume(context: CommandContext, turn: ChatTurn, which: str) -> str:
    """Continue conversation N of /sessions; the current one stays kept and listed."""
    listed = await _newest_first(context, turn)
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
    store = context.store
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


async def status(context: CommandContext, turn: ChatTurn, _arg: str) -> str:
    """Where this chat stands and how the gateway is doing."""
    meta, worker = turn.meta, context.status
    uptime = int(time.time() - worker.started_at)
    pending = await context.inbox.pending(turn.chat)
    return "\n".join(
        [
            f"Session {turn.session_id}"
            f" ({'continues ' + meta.parent_session_id if meta.parent_session_id else 'root'})",
            f"Model {context.model(turn)}",
            f"Messages {meta.count}, compactions {meta.compaction_count}, pending in inbox {max(0, pending - 1)}",
            f"Worker {worker.worker_id}, up {uptime // 3600}h{uptime % 3600 // 60:02d}m,"
            f" chats running here {worker.busy_chats}",
        ]
    )


async def stop(context: CommandContext, turn: ChatTurn, _arg: str) -> str:
    """End the reply being written. The stop itself happens as the message arrives (the running turn
    honours it and clears it); by the time this command's own turn comes, only a leftover is cleared."""
    if await context.inbox.clear_stop(turn.chat):
        return "Nothing was being written; there is nothing to stop."
    return "⏹ Stopped. What was written so far is kept; your next message is answered as usual."
