"""Token counting: exact and offline, a rough estimate that stays close, counts cached per message."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from agent.tokens import (
    count_message,
    count_messages,
    count_text,
    estimate_messages_tokens_rough,
    estimate_text_tokens_rough,
)

ENGLISH = (
    "We decided to keep the webhook handler idempotent: Telegram redelivers an update when the "
    "answer takes longer than a minute, so the handler records the update id before doing any work. "
    "The deployment on Friday went smoothly, although the metrics dashboard showed a short spike in "
    "latency right after the Redis failover, which we traced to connection pool warm-up. "
) * 6
CODE = (
    textwrap.dedent(
        '''
    async def commit(self, chat: str, messages: list[dict], *, lock: Lock) -> list[str]:
        """Append messages under the chat lock; refuse when the lock has expired."""
        ids = [str(n) for n in range(await self._next_id(chat), len(messages))]
        for message_id, message in zip(ids, messages):
            message["_id"] = message_id
            if not isinstance(message.get("content"), (str, list, type(None))):
                raise ValueError(f"bad content in {message_id}: {message!r}")
        result = await self._append_script(keys=[self._key(chat, "active")], args=[lock.token, *ids])
        return result if result else []
    '''
    )
    * 4
)
JAPANESE = (
    "コンテキストの圧縮は、会話が長くなってもモデルの窓に収まるようにするための仕組みです。"
    "ゲートウェイは応答の前に八十五パーセントで整理を行い、エージェントは五十パーセントで要約します。"
    "要約に失敗しても、会話の途中が黙って消えることは決してありません。"
) * 5
JSON_TEXT = (
    json.dumps(
        {
            "update_id": 912345678,
            "message": {
                "message_id": 4411,
                "from": {"id": 123456789, "is_bot": False, "first_name": "Aiko", "language_code": "ja"},
                "chat": {"id": -1001234567890, "type": "supergroup", "title": "ops"},
                "date": 1764470000,
                "text": "please check PR #4821 and the failing job on main",
                "entities": [{"offset": 0, "length": 6, "type": "bot_command"}],
            },
        },
        indent=2,
    )
    * 4
)


@pytest.mark.parametrize("sample", [ENGLISH, CODE, JAPANESE, JSON_TEXT], ids=["english", "code", "japanese", "json"])
def test_rough_estimate_within_35_percent_of_exact(sample: str) -> None:
    exact = count_text(sample)
    rough = estimate_text_tokens_rough(sample)
    assert abs(rough - exact) <= 0.35 * exact, (rough, exact)


def test_message_count_includes_role_overhead_tool_envelope_and_arguments() -> None:
    plain = {"role": "assistant", "content": "Looking at the log now."}
    with_call = {
        "role": "assistant",
        "content": "Looking at the log now.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "gateway/store.py"}'},
            }
        ],
    }
    assert count_message(dict(plain)) > count_text(plain["content"])
    extra = count_message(dict(with_call)) - count_message(dict(plain))
    assert extra > count_text('{"path": "gateway/store.py"}')


def test_count_is_cached_on_the_message_and_not_recounted() -> None:
    message = {"role": "user", "content": "hello there"}
    first = count_message(message)
    assert message["_tok"] == first
    message["content"] = "a much longer text " * 50  # a stale cache is served: edits must make a new dict
    assert count_message(message) == first


def test_list_content_counts_its_text_parts() -> None:
    as_list = {"role": "user", "content": [{"type": "text", "text": ENGLISH}]}
    as_string = {"role": "user", "content": ENGLISH}
    assert count_message(as_list) == count_message(as_string)


def test_messages_estimate_tracks_exact_on_a_mixed_transcript() -> None:
    transcript = [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": JAPANESE},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "shell", "arguments": json.dumps({"cmd": "git log -3"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": CODE},
        {"role": "assistant", "content": ENGLISH},
        {"role": "user", "content": JSON_TEXT},
    ]
    exact = count_messages([dict(m) for m in transcript])
    rough = estimate_messages_tokens_rough(transcript)
    assert abs(rough - exact) <= 0.35 * exact


def test_exact_counts_are_identical_with_network_blocked(tmp_path) -> None:
    """A fresh process with every socket refused and an empty tiktoken cache counts the same."""
    samples = [ENGLISH, CODE, JAPANESE, JSON_TEXT]
    program = textwrap.dedent(
        """
        import json, socket, sys

        def refuse(*args, **kwargs):
            raise OSError("network blocked by test")

        socket.socket = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        from agent.tokens import count_text
        samples = json.load(sys.stdin)
        print(json.dumps([count_text(s) for s in samples]))
        """
    )
    env = {"TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache"), "DATA_GYM_CACHE_DIR": str(tmp_path / "dg"), "PATH": ""}
    result = subprocess.run(
        [sys.executable, "-c", program], input=json.dumps(samples), capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [count_text(s) for s in samples]
