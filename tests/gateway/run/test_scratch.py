"""The throwaway gateway of demos and replays, and how a gateway's Redis is named in one-line reports."""

from __future__ import annotations

from pathlib import Path

from gateway.config import Settings
from gateway.run.scratch import describe_gateway, throwaway_gateway, without_credentials


def test_a_throwaway_gateway_has_its_own_embedded_server_and_is_removed_afterwards(tmp_path):
    mine = Settings(redis={"url": "redis://db.example:6379/0", "cluster": False}, gateway={"home": str(tmp_path)})
    with throwaway_gateway(mine, "replay") as scratch:
        home = Path(scratch.gateway.home)
        assert home.is_dir() and home != tmp_path and scratch.redis.url == ""
        assert scratch.model == mine.model and scratch.compression == mine.compression  # only where it stores changed
    assert not home.exists()


def test_reports_never_print_a_redis_password():
    assert without_credentials("redis://:s3cret@db.example:6379/0") == "redis://db.example:6379/0"
    assert without_credentials("rediss://user:s3cret@db.example:6380") == "rediss://db.example:6380"
    assert without_credentials("unix:///run/redis.sock") == "unix:///run/redis.sock"
    shown = describe_gateway(Settings(redis={"url": "redis://:s3cret@db.example:6379/0"}))
    assert "s3cret" not in shown and "db.example:6379" in shown
