"""``foldgate doctor`` checks the transcription endpoint when voice is transcribed: against the fake OpenAI
transcription service on loopback, a working route, a refused key, an unknown model, a server error, a server
that never answers and one that is not there — each one row, one line, never a traceback; and no row at all
while transcription is off."""

from __future__ import annotations

import wave
from io import BytesIO

import pytest

from gateway.cli.doctor import PROVIDER_TIMEOUT, checks_for
from gateway.cli.doctor_extras import check_transcription, silent_wav
from gateway.config import Settings
from tests.fakes.cli import closed_port, foldgate
from tests.fakes.transcription import Failure, FakeTranscriptionServer

KEY = "sk-transcribe-right"


def settings_for(base_url: str, *, api_key: str = KEY, model: str = "whisper-1", timeout: float = 60.0) -> Settings:
    return Settings(
        media={
            "transcription": {
                "provider": "custom",
                "base_url": base_url,
                "api_key": api_key,
                "model": model,
                "timeout_seconds": timeout,
            }
        }
    )


def test_the_probe_is_half_a_second_of_audio_every_server_reads() -> None:
    with wave.open(BytesIO(silent_wav())) as clip:
        assert (clip.getnchannels(), clip.getsampwidth()) == (1, 2)
        assert clip.getnframes() / clip.getframerate() == pytest.approx(0.5)


async def test_a_working_endpoint_is_ok_and_was_sent_what_a_voice_message_sends() -> None:
    async with FakeTranscriptionServer(api_key=KEY, default="") as service:
        check = await check_transcription(settings_for(service.base_url))
    assert check.status == "ok", check
    assert check.detail == f"whisper-1 at {service.base_url} transcribed a 0.5 s test clip"
    (request,) = service.requests
    assert request.path == "/v1/audio/transcriptions" and not request.refused
    assert request.model == "whisper-1" and request.file_name.endswith(".wav") and request.audio


async def test_a_refused_key_names_the_key() -> None:
    async with FakeTranscriptionServer(api_key=KEY) as service:
        check = await check_transcription(settings_for(service.base_url, api_key="sk-wrong-key"))
    assert check.status == "FAIL"
    assert check.detail == (
        "media.transcription.api_key: the transcription service answered 401 Unauthorized: "
        f"Incorrect API key provided. ({service.base_url})"
    )


async def test_an_unknown_model_names_the_model() -> None:
    async with FakeTranscriptionServer(api_key=KEY) as service:
        service.enqueue(Failure.status(404, "The model `whisper-9` does not exist or you do not have access to it."))
        check = await check_transcription(settings_for(service.base_url, model="whisper-9"))
    assert check.status == "FAIL"
    assert check.detail.startswith(
        "media.transcription.model: the transcription service answered 404 Not Found: "
        "The model `whisper-9` does not exist"
    )


async def test_a_server_error_names_the_url() -> None:
    async with FakeTranscriptionServer(api_key=KEY) as service:
        service.enqueue(Failure.status(503, "The engine is currently overloaded."))
        check = await check_transcription(settings_for(service.base_url))
    assert check.status == "FAIL"
    assert check.detail.startswith(
        "media.transcription.base_url: the transcription service answered 503 Service "
        "Unavailable: The engine is currently overloaded."
    )


async def test_a_server_that_never_answers_fails_on_its_own_timeout() -> None:
    """The configured 1 s ends the check, not the doctor's longer guard: the row names the 1 s the client waited
    (the guard's row would name ``PROVIDER_TIMEOUT``), after the one request, which was not tried again."""
    async with FakeTranscriptionServer(api_key=KEY) as service:
        service.enqueue(Failure.never_answers())
        check = await check_transcription(settings_for(service.base_url, timeout=1.0))
    assert check.status == "FAIL"
    assert check.detail.startswith("media.transcription.base_url: the transcription service did not answer within 1 s")
    assert f"within {PROVIDER_TIMEOUT:g} s" not in check.detail and len(service.requests) == 1


async def test_an_endpoint_nobody_listens_on_says_where_to_look() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    check = await check_transcription(settings_for(url))
    assert check.status == "FAIL"
    assert check.detail == (
        f"media.transcription.base_url: the transcription service could not be reached "
        f"(ConnectError) ({url}) — check media.transcription.base_url, the network, and "
        "HTTPS_PROXY if this network needs a proxy"
    )


async def test_transcription_off_has_no_row() -> None:
    settings = Settings()
    assert "transcription" not in checks_for(settings)
    check = await check_transcription(settings)
    assert (check.status, check.detail) == ("skipped", "media.transcription.provider is off")
    assert "transcription" in checks_for(settings_for("http://127.0.0.1:1/v1"))


async def test_the_command_prints_one_row_for_it_and_no_traceback(tmp_path, redis_url) -> None:
    async with FakeTranscriptionServer(api_key=KEY) as service:
        config = f"""\
redis: {{url: "{redis_url}"}}
platforms: {{local: {{enabled: true}}}}
media:
  transcription: {{provider: custom, base_url: "{service.base_url}", api_key: sk-not-this-one}}
"""
        code, output = await foldgate(tmp_path, config, "doctor")
    assert code == 1, output
    assert "Traceback" not in output
    rows = [line for line in output.splitlines() if line.startswith("transcription ")]
    assert len(rows) == 1, output
    _, result, detail = rows[0].split(None, 2)
    assert result == "FAIL" and detail.startswith("media.transcription.api_key: the transcription service answered 401")
    assert "failed (transcription)" in output.splitlines()[-1]
