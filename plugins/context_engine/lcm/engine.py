"""``LcmEngine``: lossless context management on top of the built-in compressor.

It compacts exactly when and how :class:`agent.context_compressor.ContextCompressor`
does — same thresholds, phases, summarizer, fallback and anti-thrash guards — and then
treats the result as an index into the archive rather than a replacement for it: the
summary lists each compaction's message ids, the ledger remembers them across restarts
(in the session meta, via :meth:`export_state`), and the model gets tools to search the
archive (``lcm_grep``), read originals verbatim (``lcm_expand``) and list the ranges
(``lcm_describe``). Nothing the engine folds away is out of reach: in the gateway the
session archive holds it; without one the engine keeps it in memory.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent import json_codec
from agent.context_compressor import ContextCompressor
from agent.messages import Message, with_content
from agent.search import SearchError
from agent.tokens import count_message, count_messages
from agent.tools import MAX_FETCH_CHARS, MessageSource
from plugins.context_engine.lcm import index_text, tools
from plugins.context_engine.lcm.archive import ArchiveView, MemoryArchive, is_derived
from plugins.context_engine.lcm.departures import Departures
from plugins.context_engine.lcm.ids import RangeError, select_range, split_range
from plugins.context_engine.lcm.ledger import Ledger

log = logging.getLogger(__name__)

#: A compaction label as the summary cites it.
_LABEL = re.compile(r"[rR][0-9]+")
#: Version of the ``lcm`` part of :meth:`LcmEngine.export_state`.
STATE_VERSION = 1


class LcmEngine(ContextCompressor):
    """The compressor's compaction, made lossless and navigable; see the module docstring."""

    name = "lcm"

    def __init__(self, model: str, context_length: int, *args: Any, **kwargs: Any) -> None:
        """Takes the same arguments as :class:`ContextCompressor` (thresholds, summarizer, route)."""
        super().__init__(model, context_length, *args, **kwargs)
        self.ledger = Ledger()
        self.memory = MemoryArchive()
        self.view = ArchiveView(self.memory)

    # -- the archive ----------------------------------------------------------------------

    def attach_history(self, source: MessageSource | None) -> None:
        """Read the chat's session archive through ``source`` (the gateway calls this when it builds the engine)."""
        self.view.history = source

    # -- compaction -----------------------------------------------------------------------

    async def compress(
        self,
        messages: list[Message],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
    ) -> list[Message]:
        compacted = await super().compress(messages, current_tokens, focus_topic, force)
        stats = self.last_compaction
        if stats is None or stats.outcome != "compacted":
            self.view.live = list(compacted)
            return compacted
        self._record(messages, compacted, trigger=stats.reason, summarizer=stats.summarizer)
        compacted, summary = self._as_index(messages, compacted)
        self.last_compaction = dataclasses.replace(
            stats,
            tokens_after=count_messages(compacted),
            summary_tokens=count_message(summary) if summary is not None else stats.summary_tokens,
        )
        self.view.live = list(compacted)
        return compacted

    def _record(self, before: Sequence[Message], after: Sequence[Message], *, trigger: str, summarizer: str) -> None:
        """Ledger entry and in-memory copies for every message that left the context."""
        kept_objects = {id(message) for message in after}
        kept_ids = {str(m["_id"]) for m in after if m.get("_id") is not None}
        new_versions_of = {str(m["_orig_id"]) for m in after if m.get("_orig_id") is not None}
        gone = Departures()
        gateway = self.view.history is not None
        for seq, message in enumerate(before):
            message_id = message.get("_id")
            if id(message) in kept_objects or (message_id is not None and str(message_id) in kept_ids):
                continue
            if is_derived(message):  # a summary, stub or stand-in: its originals are archived already
                continue
            archived_as = self.memory.add(message)
            if message_id is not None and str(message_id) in new_versions_of:
                gone.replace(message, archived_as)
            else:  # a local id outlives the turn only offline
                gone.fold(seq, message, archived_as if message_id is not None or not gateway else None)
        gone.record_in(self.ledger, at=self.clock(), trigger=trigger, summarizer=summarizer)

    def _as_index(self, before: Sequence[Message], after: list[Message]) -> tuple[list[Message], Message | None]:
        """``(after with its new summary rewritten as an index into the archive, that summary)``."""
        originals = {id(message) for message in before}
        out = list(after)
        for position, message in enumerate(out):
            if message.get("_compressed_summary") and id(message) not in originals:
                text = index_text.compose(str(message.get("content") or ""), self.ledger)
                out[position] = with_content(message, text)
                return out, out[position]
        return out, None

    # -- tools ----------------------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return [json_codec.loads(json_codec.dumps(schema)) for schema in tools.SCHEMAS]

    async def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        if not isinstance(args, Mapping):
            return json_codec.dumps_text({"error": f"arguments for {name} must be a JSON object"})
        try:
            if name == tools.GREP:
                result = tools.grep(await self.view.all_messages(), self.ledger.ranges_by_id(), args)
            elif name == tools.EXPAND:
                result = await self._expand(args)
            elif name == tools.DESCRIBE:
                result = tools.describe(self.ledger, backing=self.view.backing, archived_in_memory=len(self.memory))
            else:
                return await super().handle_tool_call(name, args)
        except (tools.ToolArgumentError, RangeError, SearchError) as error:
            return json_codec.dumps_text({"error": str(error)})
        except Exception as error:  # the archive being unreachable must not end the turn
            log.exception("%s failed", name)
            return json_codec.dumps_text({"error": f"{name} failed: {type(error).__name__}: {error}"})
        return json_codec.dumps_text(result, default=str)

    async def _expand(self, args: Mapping[str, Any]) -> dict[str, Any]:
        max_chars = tools.bounded_int(args, "max_chars", MAX_FETCH_CHARS, tools.MIN_PIECE_CHARS, MAX_FETCH_CHARS)
        from_char = tools.bounded_int(args, "from_char", 0, 0, 10**9)
        ids = args.get("ids")
        if isinstance(ids, (str, int)):
            ids = [ids]
        wanted_range = str(args.get("range") or "").strip()
        context: list[Message] = []
        if ids:
            wanted = [str(value) for value in ids]
            selected = await self.view.by_ids(wanted)
        elif _LABEL.fullmatch(wanted_range):
            record = self.ledger.get(wanted_range)
            if record is None:
                raise RangeError(f"no compaction {wanted_range!r} is listed; lcm_describe() shows the ranges")
            wanted = record.ids()
            selected = await self.view.by_ids(wanted)
        elif wanted_range:
            start, end = split_range(wanted_range)
            context = await self.view.all_messages()
            selected = select_range(context, start, end)
            wanted = [str(m.get("_id")) for m in selected]
        else:
            raise tools.ToolArgumentError('give ids=["…"] or range="A..B" (or a compaction label like "r1")')
        found = {str(m.get("_id")) for m in selected}
        missing = [value for value in dict.fromkeys(wanted) if value not in found]
        offset = tools.bounded_int(args, "offset", 0, 0, len(selected))
        return tools.render(
            selected[offset:],
            missing=missing,
            where=self.ledger.ranges_by_id(),
            max_chars=max_chars,
            from_char=from_char,
            offset=offset,
            context=context,
        )

    # -- lifecycle and state --------------------------------------------------------------

    def on_session_reset(self) -> None:
        super().on_session_reset()
        self.ledger = Ledger()
        self.memory.clear()
        self.view.live = []

    def export_state(self) -> dict[str, Any]:
        state = super().export_state()
        state["lcm"] = {"version": STATE_VERSION, **self.ledger.to_state()}
        return state

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        super().load_state(state)
        self.ledger = Ledger.from_state((state or {}).get("lcm"))
