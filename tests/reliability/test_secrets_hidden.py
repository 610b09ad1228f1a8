"""Users and operators never see a credential they did not ask for: a URL's password is hidden by
``config show`` and in config errors, the metrics port binds only the configured address, and a
provider's error text (which may echo the API key) never reaches a chat."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

import gateway.web.server
from gateway.cli import main
from gateway.config import CONVENTIONAL_ENV, PROVIDER_KEY_ENV, Settings, load_settings, url_password_hidden
from gateway.platforms.recording import RecordingAdapter
from gateway.run.app import serve
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

PASSWORD = "pw-Sup3rS3cret"


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.upper().startswith("FOLDGATE_") or name in CONVENTIONAL_ENV or name in PROVIDER_KEY_ENV.values():
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FOLDGATE_CONFIG", "config.yaml")
    return tmp_path


@pytest.mark.parametrize(
    "url, shown",
    [
        (f"redis://:{PASSWORD}@db.internal:6379/0", "redis://:***@db.internal:6379/0"),
        (f"rediss://app:{PASSWORD}@db.internal:6380", "rediss://app:***@db.internal:6380"),
        (f"http://{PASSWORD}@proxy.internal:3128", "http://***@proxy.internal:3128"),
        ("http://proxy.internal:3128", "http://proxy.internal:3128"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
        ("not a url @ all", "not a url @ all"),
    ],
)
def test_a_urls_password_is_hidden_and_the_rest_kept(url, shown):
    assert url_password_hidden(url) == shown


def test_config_show_hides_the_password_of_every_url_valued_key(clean_env, capsys):
    (clean_env / "config.yaml").write_text(
        f"redis:\n  url: redis://:{PASSWORD}@db.internal:6379/0\n"
        f"model:\n  provider: custom\n  base_url: https://u:{PASSWORD}@llm.internal/v1\n"
        f"  proxy: http://me:{PASSWORD}@proxy.internal:3128\n"
        f"auxiliary:\n  compression:\n    proxy: http://me:{PASSWORD}@proxy.internal:3128\n",
        encoding="utf-8",
    )
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert PASSWORD not in out
    assert "redis://:***@db.internal:6379/0" in out and "http://me:***@proxy.internal:3128" in out
    assert load_settings().redis.url == f"redis://:{PASSWORD}@db.internal:6379/0"  # the value itself is intact


@pytest.mark.parametrize(
    "text",
    [
        f"redis:\n  url: http://:{PASSWORD}@db.internal:6379\n",  # wrong scheme: the error shows the value
        f"model:\n  proxy: ftp://me:{PASSWORD}@proxy.internal:2121\n",  # no proxy scheme: the error shows the value
        f'model:\n  base_url: ["https://u:{PASSWORD}@llm.internal"]\n',  # nested junk is shown too
    ],
)
def test_config_errors_hide_a_urls_password(clean_env, capsys, text):
    (clean_env / "config.yaml").write_text(text, encoding="utf-8")
    assert main(["config", "check"]) == 1
    captured = capsys.readouterr()
    assert PASSWORD not in captured.out + captured.err
    assert "***" in captured.err


def test_config_errors_from_the_environment_hide_a_urls_password(clean_env, capsys, monkeypatch):
    (clean_env / "config.yaml").write_text("", encoding="utf-8")
    monkeypatch.setenv("FOLDGATE_REDIS__URL", f"http://:{PASSWORD}@db.internal:6379")
    assert main(["config", "check"]) == 1
    captured = capsys.readouterr()
    assert PASSWORD not in captured.out + captured.err and "FOLDGATE_REDIS__URL" in captured.err


# --------------------------------------------------------------------------- the metrics address


def test_metrics_host_defaults_to_loopback():
    assert Settings().gateway.metrics_host == "127.0.0.1"


@pytest.mark.parametrize("host", [None, "::1"])
async def test_the_metrics_endpoint_binds_the_configured_address(tmp_path, redis_url, key_prefix, monkeypatch, host):
    bound: list[tuple[str, int]] = []
    real = gateway.web.server.start_site

    async def recording(app, address, port, *, setting):
        bound.append((address, port))
        return await real(app, "127.0.0.1", 0, setting=setting)  # a free port: only the address asked for matters here

    monkeypatch.setattr(gateway.web.server, "start_site", recording)
    async with FakeLLMServer(handler=lambda request: Reply.answer("ok")) as server:
        settings = make_settings(
            redis_url,
            key_prefix,
            server.openai_base_url,
            context_length=16_000,
            gateway={"home": str(tmp_path), "metrics_port": 9464, **({"metrics_host": host} if host else {})},
        )
        assert await serve(settings, demo=True, out=io.StringIO()) == 0
    assert bound == [(host or "127.0.0.1", 9464)]


# --------------------------------------------------------------------------- provider text never reaches the chat


API_KEY = "sk-live-ECHOED-9f8e7d6c5b4a"


def refusing(request: RecordedRequest) -> Reply:
    return Reply.error(
        401,
        f"Incorrect API key provided: {API_KEY}. See https://internal.example/keys",
        kind="invalid_request_error",
        code="invalid_api_key",
    )


def everything_sent(adapter: RecordingAdapter) -> str:
    return repr(vars(adapter))  # replies, and whatever else the adapter recorded (previews, edits)


async def test_a_401_that_echoes_the_key_never_puts_it_or_the_base_url_in_the_chat(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=refusing) as server:
        settings = Settings(
            redis={"url": redis_url, "key_prefix": key_prefix},
            platforms={"local": {"enabled": True}},
            model={
                "name": "test-model",
                "provider": "custom",
                "base_url": server.openai_base_url,
                "context_length": 16_000,
                "api_key": API_KEY,
                "max_retries": 0,
            },
        )
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            for index, text in enumerate(["hello", "/model other-model", "/compress", "again"]):
                await runner.intake(message("c", str(index), text))
                await runner.wait_idle()
    sent = everything_sent(adapter)
    assert len(adapter.sent) == 4  # every message was answered
    assert API_KEY not in sent and "internal.example" not in sent
    assert server.openai_base_url not in sent and "127.0.0.1" not in sent
