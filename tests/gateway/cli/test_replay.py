"""A recorded conversation replayed through the whole gateway: tool loops, in-loop compaction, an overnight
backlog caught by hygiene, and a decision recovered the next morning."""

from __future__ import annotations

import json

import pytest
import redis as sync_redis

from gateway.cli import main as cli_main
from gateway.cli.replay import FixtureError, load_fixture, replay
from gateway.config import Settings
from tests.fakes.paths import RECORDED

FIXTURE = RECORDED / "overnight_ops.jsonl"
WINDOW = 16_000


def settings_for(redis_url: str, prefix: str) -> Settings:
    return Settings(
        redis={"url": redis_url, "key_prefix": prefix},
        model={"name": "replayed-model", "provider": "local", "context_length": WINDOW},
        platforms={"local": {"enabled": True}},
    )


async def test_overnight_fixture_replays_with_both_compaction_layers_and_never_overflows(redis_url, key_prefix):
    report = await replay(settings_for(redis_url, key_prefix), load_fixture(FIXTURE))
    assert report.in_loop_compactions >= 1  # the tool-heavy evening crossed 50%
    assert report.hygiene_compactions == 1  # the overnight backlog crossed 85%
    assert report.peak_prompt_tokens < WINDOW  # the model never saw a prompt above its window
    assert report.turns == 17
    last_chat, last_reply = report.replies[-1]
    assert "ubuntu-22.04" in last_reply and last_chat == "ops"
    assert report.tokens_sent > report.peak_prompt_tokens


def test_a_broken_fixture_line_is_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"kind": "message", "text": "hi"}) + "\n{not json\n")
    with pytest.raises(FixtureError, match=r"bad.jsonl:2"):
        load_fixture(bad)


def test_replay_command_prints_the_table(redis_url, key_prefix, tmp_path, capsys, monkeypatch):
    config = tmp_path / "config.yaml"
    config.write_text(
        f"redis:\n  url: {redis_url}\n  key_prefix: {key_prefix}\n"
        f"model:\n  provider: local\n  context_length: {WINDOW}\n"
    )
    assert cli_main(["--config", str(config), "replay", str(FIXTURE)]) == 0
    table = capsys.readouterr().out
    assert "hygiene compactions" in table and "peak context" in table


def _turns(table: str) -> int:
    return int(next(line for line in table.splitlines() if line.startswith("turns")).split()[-1])


def test_replays_run_in_a_throwaway_gateway_unless_kept(redis_url, key_prefix, tmp_path, capsys):
    """Replaying twice shows the whole replay twice and leaves nothing in the configured Redis;
    ``--keep`` writes into it, and a second kept replay says its messages were already there."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"redis:\n  url: {redis_url}\n  key_prefix: {key_prefix}\n"
        f"model:\n  provider: local\n  context_length: {WINDOW}\n"
        f"gateway:\n  home: {tmp_path / 'home'}\n"
    )
    redis_sync = sync_redis.Redis.from_url(redis_url)
    tables = []
    for _ in range(2):
        assert cli_main(["--config", str(config), "replay", str(FIXTURE)]) == 0
        tables.append(capsys.readouterr().out)
    assert _turns(tables[0]) == _turns(tables[1]) > 0
    assert all("in a throwaway gateway" in table for table in tables)
    assert not redis_sync.keys(f"{key_prefix}:*")  # the configured Redis was never written to

    assert cli_main(["--config", str(config), "replay", "--keep", str(FIXTURE)]) == 0
    kept = capsys.readouterr().out
    assert _turns(kept) == _turns(tables[0]) and "into your gateway (Redis at" in kept
    assert redis_sync.keys(f"{key_prefix}:*")
    assert cli_main(["--config", str(config), "replay", "--keep", str(FIXTURE)]) == 0
    again = capsys.readouterr().out
    assert _turns(again) == 0 and "were already stored by an earlier replay" in again
    assert "replayed 0 messages into your gateway" in again and "messages replayed    0\n" in again
    redis_sync.close()
