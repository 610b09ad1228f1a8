"""An offline stand-in model, so foldgate runs end to end on a machine with no credentials or network.

It is not a language model: it records statements, and answers questions by calling
``session_search`` over the conversation (archive included) and quoting the best hit.
That is enough to show the whole pipeline working — storage, hygiene, compaction,
recovery — and it reports usage like a provider (exact prompt token counts), so the
compressor and hygiene see real numbers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent import json_codec
from agent.llm.stream import EventSink, TextDelta, ToolCallStarted
from agent.llm.types import Completion
from agent.messages import is_real_user_message, text_of
from agent.tokens import count_messages, count_text
from agent.usage import Usage

_QUESTION_START = re.compile(
    r"^\s*(what|which|when|where|who|whom|why|how|remind|recall|did|do|does|is|are|was|were|find|search)\b", re.I
)
_WORD = re.compile(r"[#\w./:-]+")
_FILLER = frozenset(
    [
        "what",
        "which",
        "when",
        "where",
        "who",
        "whom",
        "why",
        "how",
        "remind",
        "recall",
        "did",
        "do",
        "does",
        "is",
        "are",
        "was",
        "were",
        "find",
        "search",
        "the",
        "a",
        "an",
        "of",
        "to",
        "in",
        "on",
        "for",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "it",
        "that",
        "this",
        "about",
        "again",
        "please",
        "us",
        "tell",
        "say",
        "said",
        "earlier",
        "before",
        "and",
        "or",
        "with",
        "from",
        "was",
        "is",
        "be",
        "been",
        "any",
    ]
)


def _is_question(text: str) -> bool:
    return text.rstrip().endswith("?") or bool(_QUESTION_START.match(text))


def _keywords(text: str) -> str:
    words = [w.strip(".,:;!?") for w in _WORD.findall(text)]
    kept = [w for w in words if w and w.lower() not in _FILLER]
    return " ".join(kept[:8]) or text[:80]


class LocalDemoModel:
    """``provider: local`` — answers from the conversation itself, offline and deterministic."""

    context_length = 32_768

    def __init__(self, name: str = "local-demo") -> None:
        self.name = name
        self.requests: int = 0

    async def list_models(self) -> list[str]:
        """The one model this stand-in plays (under its configured name); nothing else is served."""
        return [self.name]

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str | None = None,
        max_tokens: int = 1024,
        tools: Sequence[Mapping[str, Any]] | None = None,
        temperature: float | None = None,
        on_event: EventSink | None = None,
    ) -> Completion:
        self.requests += 1
        tool_names = {t.get("function", {}).get("name") for t in tools or ()}
        completion = self._reply(messages, tool_names)
        prompt = count_messages([dict(m) for m in messages]) + count_text(json_codec.dumps_text(list(tools or ())))
        out = count_text(completion.text) + sum(count_text(c["function"]["arguments"]) for c in completion.tool_calls)
        usage = Usage(prompt_tokens=prompt, completion_tokens=out, total_tokens=prompt + out)
        if on_event is not None:  # streamed a word at a time, as a provider streams tokens
            for word in re.findall(r"\S+\s*|\s+", completion.text):
                await on_event(TextDelta(word))
            for call in completion.tool_calls:
                await on_event(ToolCallStarted(call["function"]["name"]))
        return Completion(completion.text, completion.tool_calls, completion.finish_reason, usage, {})

    def _reply(self, messages: Sequence[Mapping[str, Any]], tool_names: set[Any]) -> Completion:
        """What to answer, before usage is counted: the search's best hit after a search, a search for a
        question, an acknowledgement for anything else."""
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            return self._answer_from_search(messages)
        question = next((text_of(m) for m in reversed(messages) if is_real_user_message(m)), "")
        if question and _is_question(question) and "session_search" in tool_names:
            call: dict[str, Any] = {
                "id": f"local_{self.requests}",
                "type": "function",
                "function": {
                    "name": "session_search",
                    "arguments": json_codec.dumps_text({"query": _keywords(question)}),
                },
            }
            return Completion(text="", tool_calls=[call], finish_reason="tool_calls")
        words = len(question.split())
        return Completion(
            text=f"Noted ({words} words). Ask me about anything from earlier — I can search the whole conversation."
        )

    @staticmethod
    def _answer_from_search(messages: Sequence[Mapping[str, Any]]) -> Completion:
        try:
            result = json_codec.loads(text_of(messages[-1]))
        except ValueError:
            result = {}
        question = next((text_of(m) for m in reversed(messages) if is_real_user_message(m)), "")
        # The question itself is in the conversation too; an answer is another message.
        hits = [
            h
            for h in result.get("hits") or ()
            if not _is_question(str(h.get("snippet", ""))) and question.strip() not in str(h.get("snippet", ""))
        ]
        if not hits:
            return Completion(text="I searched our whole conversation, archive included, and found nothing about that.")
        best = hits[0]
        snippet = " ".join(str(best.get("snippet", "")).split())[:600]
        return Completion(text=f"From earlier (message {best.get('message_id')}): {snippet}")
