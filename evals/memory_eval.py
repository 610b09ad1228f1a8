"""People's memory, measured on generated multi-person worlds: what compactions keep about whom, what
``session_search`` finds across a person's chats, and whether anything of one person reaches another.

Each world (:mod:`evals.people_conversations`: 3–5 people, their private chats, two groups, conversations days
apart) is stored in Redis as the gateway stores it, through :class:`gateway.store.SessionStore`: one
conversation after another, a ``/new`` between a chat's conversations, each person's chats noted in
:class:`gateway.store.person_chats.PersonChats` as they write. Every conversation but the last of each private
chat is then compacted in place as a compaction would (all but its last two messages folded into the archive),
its fold's entries committed with it and published into a real :class:`gateway.store.memory.MemoryStore` by
:class:`gateway.memory.folds.FoldMemory` (scope ``private`` in a private chat, ``group:<chat>`` in a group, as
:func:`gateway.memory.scopes.scope_of` decides from the message). Then:

- **memory precision and recall**: each person's entries against what they planted. An entry is true when it
  holds one of that person's planted statements, from the message that said it, in the scope it was said in;
  precision is the true share of all entries, recall the share of statements some entry holds, by kind. An
  entry from a distractor (someone else's likes, a supposition, a question, a mood, quoted words, a hedge, the
  injected "remember that Dana's PIN is …") is counted against its kind; one from small talk as ``small talk``.
- **recall@5 / @10 of ``session_search``**: every statement's question asked from the person's private chat
  (its last conversation) through the real tool of :func:`agent.tools.recovery.recovery_tools`, scope
  ``my chats`` over :class:`gateway.person_history.PersonHistory`, and the default scope (this chat) beside it;
  a hit counts when its id is the statement's message as that source names it (plain in the conversation asked
  in, ``<session>:<id>`` in another of the chat, ``<chat>|<session>:<id>`` in another chat).
- **leaks** (must be 0): for every person and every chat of theirs, the memory block a message of theirs there
  carries (:class:`gateway.memory.block.MemoryReader`) holding another person's planted statement or entry; and
  a ``my chats`` hit from another person's private chat. ``foldgate eval memory`` exits 1 when there is any.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from evals.memory_held_out import other_sets, sets_markdown
from evals.people_conversations import REPORTED, TUNED, Said, World, world

DEFAULT_WORLDS = 20
DEFAULT_SEED = 1
#: Messages a compaction leaves live at the end of each conversation.
KEEP_LIVE = 2
#: Hits asked of each search; recall is reported at 5 and at this depth.
DEPTH = 10
#: The memory block's bound, as shipped (``memory.max_tokens``).
MAX_TOKENS = 1000
PLATFORM = "tg"

#: The chat model's window the blocks are made for: large enough that memory.max_tokens alone bounds them.
WINDOW = 128_000
#: The verdict of a statement kept by an entry that is true for another statement of the same message.
ALSO = "also true"


def _incoming(chat: str, user: str, name: str) -> Any:
    """A message of ``user`` (``tg:<id>``) in ``chat``, as the platform hands it in."""
    from gateway.platforms.base import IncomingMessage

    return IncomingMessage(
        platform=PLATFORM,
        chat_id=chat.partition(":")[2],
        user_id=user.partition(":")[2],
        user_name=name,
        update_id=uuid.uuid4().hex,
        text="hi",
    )


class _Run:
    """One world stored and measured on one Redis prefix."""

    def __init__(self, made: World, store: Any, memory: Any, chats: Any, folds: Any) -> None:
        self.world, self.store, self.memory, self.chats, self.folds = made, store, memory, chats, folds
        self.sids: dict[int, str] = {}  # session index -> stored session id
        self.names = {p.key: p.name for p in made.people}

    async def store_all(self) -> None:
        started: set[str] = set()
        for number, session in enumerate(self.world.sessions):
            lock = await self.store.acquire_lock(session.chat, 60)
            try:
                if session.chat in started:
                    sid = await self.store.new_session(session.chat, lock=lock)
                else:
                    sid = await self.store.current_session(session.chat)
                    started.add(session.chat)
                self.sids[number] = sid
                await self.store.append(session.chat, sid, session.messages, lock=lock)
                await self._note(session.chat, session.messages)
                if not session.asking:
                    await self._compact(session.chat, sid, session.messages, lock)
            finally:
                await self.store.release_lock(lock)

    async def _note(self, chat: str, messages: Sequence[dict[str, Any]]) -> None:
        from gateway.memory.scopes import is_private

        last: dict[str, float] = {}
        for message in messages:
            if message.get("_user"):
                last[message["_user"]] = float(message["_ts"])
        for person, when in last.items():
            private = is_private(_incoming(chat, person, self.names[person]))
            await self.chats.note(person, chat, private=private, when=when)

    async def _compact(self, chat: str, sid: str, messages: list[dict[str, Any]], lock: Any) -> None:
        """Fold all but the last messages into the archive, with what the fold keeps about their writers."""
        from gateway.memory.scopes import scope_of

        writer = next(m["_user"] for m in reversed(messages) if m.get("_user"))  # the turn that compacts
        scope = scope_of(_incoming(chat, writer, self.names[writer]))
        summary = {"role": "user", "content": "[summary] what was said before", "_synthetic": "summary"}
        after = [summary, *messages[-KEEP_LIVE:]]
        fields = self.folds.commit_fields(await self.store.meta(chat, sid), messages, after, [], chat=chat, scope=scope)
        await self.store.commit_compaction(
            chat, sid, after, lock=lock, in_place=True, compaction_id=f"eval-{sid}", meta=fields
        )
        await self.folds.publish(chat, sid, lock, PLATFORM)

    def message_id(self, said: Said) -> str:
        return str(self.world.sessions[said.session].messages[said.index]["_id"])

    def expected_scope(self, said: Said) -> str:
        from gateway.memory.scopes import scope_of

        return scope_of(_incoming(said.chat, said.person, self.names[said.person]))


# --- memory precision and recall ----------------------------------------------------------------------


def entry_sentence(text: str) -> str:
    """The sentence an entry quotes (``"I'm vegan." (said 2026-01-16)`` -> ``I'm vegan.``)."""
    body = text.rsplit(" (said ", 1)[0] if text.endswith(")") else text
    return body.strip().strip('"').rstrip("\u2026")


def _key(text: str) -> str:
    return " ".join(text.casefold().replace("\u2019", "'").split()).rstrip(".!?\u2026, ")


def classify(entry: Any, person: str, run: _Run) -> tuple[str, Said | None]:
    """What an entry of ``person`` is: ``true`` (a statement of theirs), ``wrong scope``, a distractor's kind, or
    ``small talk``; and the planted line it came from."""
    sentence = _key(entry_sentence(entry.text))
    for said in run.world.said:
        if said.person != person or said.chat != entry.chat or run.message_id(said) != entry.message_id:
            continue
        if said.planted and _key(said.core) in sentence:
            return ("true" if entry.scope == run.expected_scope(said) else "wrong scope"), said
        if not said.planted and sentence and (sentence in _key(said.text) or _key(said.text) in sentence):
            return said.kind, said
    return "small talk", None


async def memory_rows(run: _Run) -> list[dict[str, Any]]:
    """One row per entry kept and per statement missed."""
    rows: list[dict[str, Any]] = []
    kept: set[int] = set()
    for person in run.world.people:
        for entry in await run.memory.entries(person.key):
            verdict, said = classify(entry, person.key, run)
            row = {"world": run.world.name, "person": person.key, "entry": entry.text, "scope": entry.scope}
            rows.append(row | {"verdict": verdict, "kind": said.kind if said else "small talk"})
            rows[-1] |= {"wording": said.wording if said else "", "said": said.text if said else ""}
            if said is not None and verdict == "true":
                kept.add(id(said))
                for also in _also_held(entry, said, run):  # one entry holding two statements of one message
                    kept.add(id(also))
                    rows.append(row | {"verdict": ALSO, "kind": also.kind, "wording": also.wording, "said": also.text})
    for said in run.world.statements:
        if id(said) not in kept:
            rows.append({"world": run.world.name, "person": said.person, "verdict": "missed", "kind": said.kind})
            rows[-1]["wording"] = said.wording
            rows[-1] |= {"said": said.text, "core": said.core, "chat": said.chat}

    return rows


def _also_held(entry: Any, said: Said, run: _Run) -> list[Said]:
    """The other statements of ``said``'s message that ``entry``, true for ``said``, holds too."""
    sentence = _key(entry_sentence(entry.text))
    return [
        other
        for other in run.world.statements
        if other is not said
        and (other.session, other.index) == (said.session, said.index)
        and _key(other.core) in sentence
        and entry.scope == run.expected_scope(other)
    ]


def memory_summary(rows: Sequence[dict[str, Any]], statements: Counter[str], distractors: Counter[str]) -> dict:
    """Precision over entries; recall over statements (an entry holding two statements of one message keeps
    both: its second is an ``also`` row, counted in recall and in its kind's figures, never as an entry)."""
    entries = [row for row in rows if row["verdict"] not in ("missed", ALSO)]
    true = [row for row in entries if row["verdict"] == "true"]
    also = [row for row in rows if row["verdict"] == ALSO]
    by_kind: dict[str, dict[str, Any]] = {}
    for kind, planted in sorted(statements.items()):
        got = sum(1 for row in [*true, *also] if row["kind"] == kind)
        traced = sum(1 for row in [*entries, *also] if row["kind"] == kind)  # true, or in the wrong scope
        by_kind[kind] = {"planted": planted, "kept": got, "recall": round(got / planted, 4)}
        by_kind[kind] |= {"entries": traced, "precision": round(got / traced, 4) if traced else None}
    false = Counter(row["verdict"] if row["verdict"] == "wrong scope" else row["kind"] for row in entries)
    del false["true"]
    for row in true:
        false.pop(row["kind"], None)
    wrong = {kind: {"planted": n, "kept": false.get(kind, 0)} for kind, n in sorted(distractors.items())}
    planted = sum(statements.values())
    return {
        "entries": len(entries),
        "true": len(true),
        "kept": len(true) + len(also),
        "precision": round(len(true) / max(1, len(entries)), 4),
        "recall": round((len(true) + len(also)) / max(1, planted), 4),
        "statements": planted,
        "by_kind": by_kind,
        "distractors": wrong,
        "small_talk_entries": sum(1 for row in entries if row["verdict"] == "small talk"),
        "wrong_scope_entries": sum(1 for row in entries if row["verdict"] == "wrong scope"),
    }


# --- session_search --------------------------------------------------------------------------------


def answer_id(run: _Run, said: Said, chat: str, sid: str) -> str:
    """The id ``session_search`` gives the message of ``said`` when asked in ``chat``'s session ``sid``."""
    from agent.tools.recovery import CHAT_SEPARATOR
    from gateway.session_source import ID_SEPARATOR

    head, local = run.sids[said.session], run.message_id(said)
    if said.chat == chat:
        return local if head == sid else f"{head}{ID_SEPARATOR}{local}"
    return f"{said.chat}{CHAT_SEPARATOR}{head}{ID_SEPARATOR}{local}"


def _rank(hits: Sequence[dict[str, Any]], wanted: str) -> int | None:
    return next((rank for rank, hit in enumerate(hits, 1) if str(hit.get("message_id")) == wanted), None)


async def search_rows(run: _Run) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every statement's question from its person's private chat: ranks in both scopes, and leaked hits."""
    from agent.tools.recovery import CHAT_SEPARATOR, recovery_tools
    from gateway.person_history import PersonHistory
    from gateway.session_source import ChatHistory

    private = {p.key for p in run.world.people}
    rows, leaks = [], []
    for person in run.world.people:
        sid = await run.store.current_session(person.key)
        everywhere = PersonHistory(run.store, run.chats, person.key, person.key, sid)
        here = ChatHistory(run.store, person.key, sid, every_session=True)
        search = next(t for t in recovery_tools(here, everywhere=everywhere) if t.name == "session_search")
        for said in (s for s in run.world.statements if s.person == person.key):
            wanted = answer_id(run, said, person.key, sid)
            mine = json.loads(str(await search.handler({"query": said.question, "scope": "my chats", "limit": DEPTH})))
            this = json.loads(str(await search.handler({"query": said.question, "limit": DEPTH})))
            for hit in mine.get("hits", []):
                chat = hit.get("chat") or str(hit.get("message_id")).rpartition(CHAT_SEPARATOR)[0] or person.key
                if chat in private and chat != person.key:
                    leaks.append({"world": run.world.name, "person": person.key, "hit": hit.get("message_id")})
            rows.append(
                {
                    "world": run.world.name,
                    "person": person.key,
                    "kind": said.kind,
                    "question": said.question,
                    "said": said.text,
                    "private": said.chat == person.key,
                    "my_chats": _rank(mine.get("hits", []), wanted),
                    "this_chat": _rank(this.get("hits", []), wanted),
                }
            )
    return rows, leaks


def _recall(rows: Sequence[dict[str, Any]], scope: str, depth: int) -> float | None:
    if not rows:
        return None
    return round(sum(1 for row in rows if row[scope] is not None and row[scope] <= depth) / len(rows), 4)


def search_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    def block(selected: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"questions": len(selected)}
        for scope in ("my_chats", "this_chat"):
            out[scope] = {f"recall@{d}": _recall(selected, scope, d) for d in (5, DEPTH)}
        return out

    kinds = sorted({row["kind"] for row in rows})
    return {
        "all": block(rows),
        "said_in_private": block([row for row in rows if row["private"]]),
        "said_in_a_group": block([row for row in rows if not row["private"]]),
        "by_kind": {kind: block([row for row in rows if row["kind"] == kind]) for kind in kinds},
    }


# --- leaks ---------------------------------------------------------------------------------------


async def block_leaks(run: _Run) -> tuple[list[dict[str, Any]], int, int]:
    """Another person's planted statement or entry in any block a person's message carries; and how many of the
    person's own true entries for that chat the blocks carried, of how many."""
    from gateway.memory.block import MemoryReader

    reader = MemoryReader(run.memory, MAX_TOKENS)
    texts: dict[str, list[str]] = {}
    for person in run.world.people:
        texts[person.key] = [s.core for s in run.world.statements if s.person == person.key]
        texts[person.key] += [entry.text for entry in await run.memory.entries(person.key)]
    leaks, shown, due = [], 0, 0
    for person in run.world.people:
        for chat in run.world.chats_of(person.key):
            meta = await run.store.meta(chat, await run.store.current_session(chat))
            block = await reader.block(_incoming(chat, person.key, person.name), meta, WINDOW)
            carried = f"{block.system}\n{block.note}".casefold()
            for other, theirs in texts.items():
                if other != person.key:
                    leaks += [
                        {"world": run.world.name, "person": person.key, "chat": chat, "of": other, "text": text}
                        for text in theirs
                        if text.casefold() in carried
                    ]
            own = await run.memory.entries(person.key, _scope(_incoming(chat, person.key, person.name)))
            due += len(own)
            shown += sum(1 for entry in own if entry.text.casefold() in carried)
    return leaks, shown, due


def _scope(message: Any) -> str:
    from gateway.memory.scopes import scope_of

    return scope_of(message)


# --- running -------------------------------------------------------------------------------------


async def evaluate(worlds: Sequence[World], redis_url: str, progress: TextIO | None = None) -> dict[str, Any]:
    """Store and measure every world on a fresh key prefix of ``redis_url`` (removed afterwards)."""
    from redis.asyncio import Redis

    from gateway.events import EventBus
    from gateway.memory.folds import FoldMemory
    from gateway.store import SessionStore
    from gateway.store.channel import channel_for
    from gateway.store.keys import every_key_pattern
    from gateway.store.memory import MemoryStore
    from gateway.store.person_chats import PersonChats

    redis = Redis.from_url(redis_url, decode_responses=True)
    channel = channel_for(redis)
    prefix = f"fgeval-{uuid.uuid4().hex[:8]}"
    memory_found: list[dict[str, Any]] = []
    search_found: list[dict[str, Any]] = []
    leaks: dict[str, list[dict[str, Any]]] = {"memory_block": [], "my_chats": []}
    shown = due = 0
    try:
        store = SessionStore(redis, prefix, channel=channel)
        memory = MemoryStore(channel, prefix)
        chats = PersonChats(channel, prefix)
        folds = FoldMemory(store, memory, EventBus())
        for number, made in enumerate(worlds, 1):
            if progress is not None:
                print(f"memory eval: {made.wordings} world {number}/{len(worlds)}", file=progress, flush=True)
            run = _Run(made, store, memory, chats, folds)
            await run.store_all()
            memory_found += await memory_rows(run)
            rows, hits = await search_rows(run)
            search_found += rows
            leaks["my_chats"] += hits
            blocks, seen, owed = await block_leaks(run)
            leaks["memory_block"] += blocks
            shown, due = shown + seen, due + owed
    finally:
        keys = [key async for key in redis.scan_iter(match=every_key_pattern(prefix), count=1000)]
        for start in range(0, len(keys), 500):
            await redis.delete(*keys[start : start + 500])
        await channel.aclose()
        await redis.aclose()
    return {"memory_rows": memory_found, "search_rows": search_found, "leaks": leaks, "shown": (shown, due)}


def merged(found: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What :func:`evaluate` found for each part of one set (dev's two), as if for one."""
    return {
        "memory_rows": [row for one in found for row in one["memory_rows"]],
        "search_rows": [row for one in found for row in one["search_rows"]],
        "leaks": {
            where: [leak for one in found for leak in one["leaks"][where]] for where in ("memory_block", "my_chats")
        },
        "shown": (sum(one["shown"][0] for one in found), sum(one["shown"][1] for one in found)),
    }


def missed_wordings(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each statement wording some statement was missed in: how often it was said and kept, worst first."""
    said = Counter(row["wording"] for row in rows if row["verdict"] in ("true", ALSO, "missed"))
    missed = Counter(row["wording"] for row in rows if row["verdict"] == "missed")
    out = [
        {"wording": w, "kind": next(r["kind"] for r in rows if r["wording"] == w), "said": said[w], "missed": n}
        for w, n in missed.items()
    ]
    return sorted(out, key=lambda row: (-row["missed"] / row["said"], -row["missed"], row["wording"]))


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def summarize(found: dict[str, Any], worlds: Sequence[World]) -> dict[str, Any]:
    statements = Counter(said.kind for made in worlds for said in made.statements)
    distractors = Counter(said.kind for made in worlds for said in made.said if not said.planted)
    shown, due = found["shown"]
    leaks = found["leaks"]
    missed = [row for row in found["memory_rows"] if row["verdict"] == "missed"]
    wrong = [row for row in found["memory_rows"] if row["verdict"] not in ("true", ALSO, "missed")]
    return {
        "memory": memory_summary(found["memory_rows"], statements, distractors),
        "search": search_summary(found["search_rows"]),
        "blocks": {"own_entries_carried": shown, "own_entries": due, "share": round(shown / max(1, due), 4)},
        "leaks": len(leaks["memory_block"]) + len(leaks["my_chats"]),
        "leak_details": leaks,
        "missed_statements": [{"kind": row["kind"], "said": row["said"], "chat": row["chat"]} for row in missed],
        "missed_wordings": missed_wordings(found["memory_rows"]),
        "false_entries": [{k: row[k] for k in ("verdict", "kind", "entry", "scope")} for row in wrong],
    }


def markdown(document: dict[str, Any]) -> str:
    memory, search = document["memory"], document["search"]
    lines = [
        "# People's memory: what compactions keep about whom, and what my chats finds",
        "",
        f"{document['worlds']} generated worlds (seed {document['seed']}), {document['people']} people, "
        f"{document['chats']} chats, {document['messages']:,} messages; {memory['statements']} statements planted "
        f"once each, {sum(d['planted'] for d in memory['distractors'].values())} distractors.",
        "",
        f"**Memory**: {memory['entries']} entries, precision {_percent(memory['precision'])}, recall "
        f"{_percent(memory['recall'])} ({memory['small_talk_entries']} from small talk, "
        f"{memory['wrong_scope_entries']} in the wrong scope).",
        "",
        "| statement kind | planted | kept | recall |",
        "|---|---:|---:|---:|",
        *(f"| {k} | {v['planted']} | {v['kept']} | {_percent(v['recall'])} |" for k, v in memory["by_kind"].items()),
        "",
        "| distractor kind | planted | kept as an entry (should be 0) |",
        "|---|---:|---:|",
        *(f"| {k} | {v['planted']} | {v['kept']} |" for k, v in memory["distractors"].items()),
        "",
        "**session_search** from the person's private chat, the question as the query: recall@5 / recall@10.",
        "",
        "| questions | n | my chats @5 | my chats @10 | this chat @5 | this chat @10 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    parts = [("all", search["all"]), ("said in private", search["said_in_private"])]
    parts += [("said in a group", search["said_in_a_group"]), *search["by_kind"].items()]
    for label, block in parts:
        cells = [_percent(block[s][f"recall@{d}"]) for s in ("my_chats", "this_chat") for d in (5, DEPTH)]
        lines.append(f"| {label} | {block['questions']} | " + " | ".join(cells) + " |")
    blocks = document["blocks"]
    lines += [
        "",
        f"**Leaks** (must be 0): {document['leaks']} — {len(document['leak_details']['memory_block'])} in memory "
        f"blocks, {len(document['leak_details']['my_chats'])} my-chats hits from another person's private chat. "
        f"The blocks carried {blocks['own_entries_carried']} of the {blocks['own_entries']} entries their person "
        "keeps for that chat.",
    ]
    if document["missed_wordings"]:
        lines += ["", "## Wordings of statements no entry kept", "", "| kind | wording | said | missed |"]
        lines.append("|---|---|---:|---:|")
        lines += [
            f"| {row['kind']} | {row['wording']} | {row['said']} | {row['missed']} |"
            for row in document["missed_wordings"]
        ]
    if document["false_entries"]:
        lines += ["", "## Entries that are not a statement of their person", "", "| why | entry |", "|---|---|"]
        lines += [f"| {row['verdict']} ({row['kind']}) | {row['entry']} |" for row in document["false_entries"][:40]]
    lines += sets_markdown(document)
    lines += ["", f"Took {document['seconds']:.1f} s."]
    return "\n".join(lines) + "\n"


def main(
    worlds: int = DEFAULT_WORLDS,
    seed: int = DEFAULT_SEED,
    out: str | Path = "evals/out",
    *,
    redis_url: str | None = None,
    progress: TextIO | None = None,
) -> tuple[dict[str, Any], dict[str, Path]]:
    """Generate, store, measure; write ``memory_eval.json`` and ``.md`` under ``out``: what ``foldgate eval
    memory`` runs (it exits 1 when ``leaks`` is not 0). ``redis_url``: None takes the Redis at 127.0.0.1:6379
    when it answers, else an embedded one for the run."""
    from evals.redis_target import bench_redis

    started = time.perf_counter()
    parts = {
        name: [[world(seed, n, wordings=part) for n in range(worlds)] for part in of] for name, of in REPORTED.items()
    }
    made = {name: [one for part in made_parts for one in part] for name, made_parts in parts.items()}

    async def measured() -> dict[str, dict[str, Any]]:
        async with bench_redis(redis_url) as url:  # each part on a prefix of its own: their people share ids
            return {
                name: merged([await evaluate(part, url, progress) for part in made_parts])
                for name, made_parts in parts.items()
            }

    every = asyncio.run(measured())
    found = every.pop(TUNED.name)
    others = {
        name: (summarize(measured_set, made[name]), measured_set, made[name]) for name, measured_set in every.items()
    }
    made_tuned = made[TUNED.name]
    document = {
        "worlds": len(made_tuned),
        "seed": seed,
        "people": sum(len(w.people) for w in made_tuned),
        "chats": sum(len(w.people) + len(w.groups) for w in made_tuned),
        "messages": sum(len(s.messages) for w in made_tuned for s in w.sessions),
        "depth": DEPTH,
        **summarize(found, made_tuned),
        "memory_rows": found["memory_rows"],
        "search_rows": found["search_rows"],
    }
    document |= other_sets(others, document)
    document["seconds"] = round(time.perf_counter() - started, 2)
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    paths = {"json": target / "memory_eval.json", "markdown": target / "memory_eval.md"}
    paths["json"].write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown(document), encoding="utf-8")
    return document, paths
