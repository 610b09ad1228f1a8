"""Generated conversation histories for compaction tests: realistic long sessions with planted facts.

``long_session`` builds an agent session of roughly the requested size — user requests,
assistant replies, tool calls with bulky outputs (files, logs, git history, JSON) — and
plants facts whose exact text must survive compaction: PR numbers, SHAs, paths, error
strings, decisions, preferences, numbers with units and names, some of them only in
tool output. Every message has an ``_id``; generation is deterministic for a seed.

``Transcript`` writes a conversation turn by turn, ``history`` a release chat of failing test runs,
``pasted_outputs`` what someone pastes into a chat from their terminal, and ``attributed`` tells whether a fact
still stands beside its subject in a compacted text.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from agent.tokens import count_message
from evals.fixtures.lexicon import make_world
from evals.fixtures.outputs import random_output

WORDS = [
    "the",
    "request",
    "handler",
    "cache",
    "layer",
    "retries",
    "timeout",
    "config",
    "parser",
    "worker",
    "queue",
    "session",
    "store",
    "index",
    "deploy",
    "build",
    "test",
    "module",
    "client",
    "server",
    "response",
    "payload",
    "schema",
    "migration",
    "token",
    "budget",
    "window",
    "summary",
    "archive",
    "search",
    "batch",
    "stream",
    "buffer",
    "latency",
    "throughput",
    "replica",
    "lock",
    "fence",
    "commit",
]


@dataclass
class Session:
    messages: list[dict[str, Any]]
    facts: list[str] = field(default_factory=list)
    tool_only_facts: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return 3 + sum(count_message(m) for m in self.messages)


class _Ids:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"m-{self.n}"


def _prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _tool_output(rng: random.Random, kind: str, chars: int) -> str:
    lines: list[str] = []
    size = 0
    while size < chars:
        if kind == "file":
            line = f"    value_{rng.randint(1, 999)} = compute_{rng.choice(WORDS)}(x, y)  # {_prose(rng, 5)}"
        elif kind == "log":
            line = (
                f"2024-06-{rng.randint(10, 28)} 12:{rng.randint(10, 59)}:{rng.randint(10, 59)} "
                f"INFO {rng.choice(WORDS)} handled in {rng.randint(1, 900)} ms"
            )
        elif kind == "git":
            line = f"{_hex(rng, 40)} {_prose(rng, 6)}"
        else:
            line = json.dumps({"id": rng.randint(1, 10**6), "name": rng.choice(WORDS), "score": rng.random()})
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def long_session(target_tokens: int, *, seed: int = 1, system: str = "You are a careful coding assistant.") -> Session:
    """A session of about ``target_tokens`` tokens with planted facts (see module docstring)."""
    rng = random.Random(seed)
    ident = _Ids()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system, "_id": ident()},
        {"role": "user", "content": "Help me finish the release of the ingest service.", "_id": ident()},
        {"role": "assistant", "content": "Sure. Let me look at the repository first.", "_id": ident()},
    ]
    facts: list[str] = []
    tool_only: list[str] = []
    tokens = sum(count_message(m) for m in messages)
    turn = 0
    call_n = 0
    while tokens < target_tokens:
        turn += 1
        planted_user = ""
        if turn % 6 == 1:
            pr = f"PR #{rng.randint(1000, 9999)}"
            fact_kind = turn % 4
            if fact_kind == 0:
                planted_user = f"We decided to go with {pr} for the retry fix; Dana Okafor will review it."
                facts += [pr, "Dana Okafor"]
            elif fact_kind == 1:
                n = rng.randint(2, 90)
                planted_user = f"I prefer tabs over spaces, and keep the timeout at {n} seconds please."
                facts.append(f"{n} seconds")
            elif fact_kind == 2:
                path = f"services/ingest/{rng.choice(WORDS)}_{rng.randint(1, 99)}.py"
                planted_user = f"Please also look at {path} before merging {pr}."
                facts += [path, pr]
            else:
                amount = f"${rng.randint(1, 9)},{rng.randint(100, 999)}"
                planted_user = f"The budget for this is {amount} per month, no more."
                facts.append(amount)
        user_text = planted_user or f"{_prose(rng, rng.randint(8, 30))} Can you check that?"
        turn_messages: list[dict[str, Any]] = [{"role": "user", "content": user_text, "_id": ident()}]
        for _ in range(rng.randint(1, 4)):
            call_n += 1
            call_id = f"call_{call_n}"
            kind = rng.choice(["file", "log", "git", "json"])
            name = {"file": "read_file", "log": "run_command", "git": "git_log", "json": "http_get"}[kind]
            args = json.dumps({"path": f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py"})
            output = _tool_output(rng, kind, rng.randint(800, 12_000))
            if rng.random() < 0.25:
                sha = _hex(rng, 40)
                error = (
                    f"IngestError: checksum mismatch for batch {rng.randint(100, 999)} "
                    f"at offset {rng.randint(1000, 99999)}"
                )
                output += f"\ncommit {sha}\n{error}\n"
                tool_only += [sha, error]
            turn_messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}],
                    "_id": ident(),
                }
            )
            turn_messages.append({"role": "tool", "tool_call_id": call_id, "content": output, "_id": ident()})
        turn_messages.append({"role": "assistant", "content": _prose(rng, rng.randint(20, 80)), "_id": ident()})
        messages += turn_messages
        tokens += sum(count_message(m) for m in turn_messages)
    return Session(messages, facts + tool_only, tool_only)


class Transcript:
    """Builds a message list with sequential ``_id``s: ``t.user("hi"); t.call("read_file", {...}, "out")``."""

    def __init__(self, system: str | None = "You are a helpful assistant.") -> None:
        self.messages: list[dict[str, Any]] = []
        self._ids = _Ids()
        self._calls = 0
        if system is not None:
            self.add({"role": "system", "content": system})

    def add(self, message: dict[str, Any]) -> dict[str, Any]:
        message.setdefault("_id", self._ids())
        self.messages.append(message)
        return message

    def user(self, text: str, **extra: Any) -> dict[str, Any]:
        return self.add({"role": "user", "content": text, **extra})

    def assistant(self, text: str = "", **extra: Any) -> dict[str, Any]:
        return self.add({"role": "assistant", "content": text, **extra})

    def call(self, name: str, arguments: dict[str, Any] | None = None, *results: str, text: str = "") -> list[str]:
        """An assistant message making one call per result (same name), followed by the results."""
        results = results or ("ok",)
        ids = []
        calls = []
        for _ in results:
            self._calls += 1
            ids.append(f"call_{self._calls}")
            calls.append(
                {
                    "id": ids[-1],
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments or {})},
                }
            )
        self.assistant(text, tool_calls=calls)
        for call_id, result in zip(ids, results):
            self.add({"role": "tool", "tool_call_id": call_id, "content": result})
        return ids

    def pending_call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        """An assistant call with no result yet (in flight)."""
        self._calls += 1
        call_id = f"call_{self._calls}"
        self.assistant(
            "",
            tool_calls=[
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments or {})},
                }
            ],
        )
        return call_id

    def exchange(self, question: str, answer: str) -> None:
        self.user(question)
        self.assistant(answer)


def history(turns=40, start=0, ids_from=0):
    """A release chat: ``turns`` steps from ``start``, each a question, a ``run_tests`` call with a long failing
    log, and a short answer (the system prompt and first exchange only from step 0); ids from ``ids_from`` on."""
    t = Transcript(system="You are a release assistant." if start == 0 else None)
    t._ids.n = ids_from
    if start == 0:
        t.exchange("Help me ship the ingest service.", "Sure.")
    for i in range(start, start + turns):
        t.user(f"Step {i}: check PR #{1000 + i} please.")
        t.call(
            "run_tests",
            {"path": f"tests/test_{i}.py"},
            f"FAILED test_{i} - IngestError: code E{i:03d}\n" + "log line\n" * 200,
        )
        t.assistant(f"Step {i} checked.")
    return t.messages


def pasted_outputs(count: int, *, chars: int = 1_000, seed: int = 1) -> list[str]:
    """``count`` user messages, each a terminal output of about ``chars`` characters pasted with the command that
    made it (logs, test runs, git, diffs, listings, query results): the bulk a log-heavy conversation is made of.
    Drawn from the eval fixtures' generators, so no two repeat and the same seed gives the same texts."""
    rng = random.Random(seed)
    world = make_world(rng)
    pasted = []
    for _ in range(count):
        name, arguments, output = random_output(rng, world, chars)
        pasted.append(f"Output of {name} {json.dumps(arguments)}:\n{output}")
    return pasted


def attributed(text: str, answer: str, subject: str) -> bool:
    """The answer stands on a line whose neighbourhood (that line and the ones next to it) names its subject."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if answer in line:
            near = "\n".join(lines[max(0, number - 1) : number + 2]).replace(answer, "\0").lower()
            if subject.lower() in near:
                return True
    return False
