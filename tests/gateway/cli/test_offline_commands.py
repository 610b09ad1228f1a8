"""``foldgate compact`` on a transcript file and ``foldgate search`` over a chat's stored history."""

from __future__ import annotations

import json

from gateway.cli import main as cli_main
from gateway.store import SessionStore
from tests.fakes.cli import config_file
from tests.fakes.paths import EVAL_DATA, RECORDED

SESSION = EVAL_DATA / "night-50k-s7.jsonl"


def test_compact_prints_stats_and_writes_a_valid_shorter_transcript(tmp_path, capsys):
    out = tmp_path / "compacted.jsonl"
    code = cli_main(
        [
            "--config",
            str(config_file(tmp_path)),
            "compact",
            "--input",
            str(SESSION),
            "--context-length",
            "40000",
            "--tail-mode",
            "lean",
            "--output",
            str(out),
        ]
    )
    assert code == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["summarizer"] == "deterministic" and stats["outcome"] == "compacted"
    assert stats["tokens_after"] < stats["tokens_before"] / 3
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == stats["messages_after"]
    assert any(m.get("_compressed_summary") for m in lines)


def test_compact_names_the_broken_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "hi"}\n{"role": "robot", "content": "?"}\n')
    assert (
        cli_main(["--config", str(config_file(tmp_path)), "compact", "--input", str(bad), "--context-length", "8000"])
        == 2
    )
    assert "bad.jsonl:2" in capsys.readouterr().err


def test_compact_on_a_replay_fixture_says_which_command_plays_it(tmp_path, capsys):
    fixture = RECORDED / "overnight_ops.jsonl"
    assert (
        cli_main(
            ["--config", str(config_file(tmp_path)), "compact", "--input", str(fixture), "--context-length", "40000"]
        )
        == 2
    )
    assert "a replay fixture record, not a message: `foldgate replay" in capsys.readouterr().err


def test_a_reader_that_stops_early_is_not_a_traceback(tmp_path):
    import subprocess
    import sys

    # `true` reads nothing and exits at once, so every write of the report meets a closed pipe
    command = (
        f"{sys.executable} -m gateway.cli --config {config_file(tmp_path)} compact --input {SESSION}"
        " --context-length 40000 | true; echo ${PIPESTATUS[0]}"
    )
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "141" and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, (
        done.stderr
    )


async def test_search_finds_a_message_in_the_archive(tmp_path, redis, redis_url, key_prefix, capsys):
    store = SessionStore(redis, key_prefix)
    chat = "tg:42"
    sid = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 30)
    assert lock is not None
    await store.append(
        chat,
        sid,
        [
            {"role": "user", "content": "the staging password rotates on 2026-12-01"},
            {"role": "assistant", "content": "noted"},
        ],
        lock=lock,
    )
    active = await store.active(chat, sid)
    await store.commit_compaction(
        chat,
        sid,
        [{"role": "user", "content": "[CONTEXT COMPACTION] earlier turns"}, active[-1]],
        lock=lock,
        in_place=True,
        compaction_id="c1",
    )
    await store.release_lock(lock)
    config = config_file(tmp_path, redis_url, key_prefix)
    import asyncio

    code = await asyncio.to_thread(cli_main, ["--config", str(config), "search", chat, "staging password"])
    assert code == 0
    assert "2026-12-01" in capsys.readouterr().out
