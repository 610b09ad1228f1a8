"""Voice to text through an OpenAI-compatible endpoint (a fake on loopback that checks the multipart shape),
every failure a clear TranscriptionError; and the ``media:`` settings that configure it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from gateway.config import ConfigError, load_settings
from gateway.config.models import MediaSettings, TranscriptionSettings
from gateway.media.errors import TranscriptionError
from gateway.media.transcribe import Transcriber, transcriber_from, upload_name
from tests.fakes.transcription import Failure, FakeTranscriptionServer, Heard

OGG = b"OggS\x00\x02" + bytes(range(200))  # what a Telegram voice message starts with


@pytest_asyncio.fixture
async def service() -> AsyncIterator[FakeTranscriptionServer]:
    async with FakeTranscriptionServer(api_key="sk-test") as server:
        yield server


@pytest_asyncio.fixture
async def transcriber(service: FakeTranscriptionServer) -> AsyncIterator[Transcriber]:
    settings = TranscriptionSettings(
        provider="custom", base_url=service.base_url, api_key="sk-test", model="whisper-large-v3", timeout_seconds=1
    )
    made = Transcriber(settings)
    try:
        yield made
    finally:
        await made.aclose()


async def test_voice_is_sent_as_openai_multipart_and_the_text_comes_back(
    service: FakeTranscriptionServer, transcriber: Transcriber
) -> None:
    service.enqueue(Heard("  Meet me at the station at ten.  "))
    assert await transcriber.transcribe(OGG, name="", mime="audio/ogg") == "Meet me at the station at ten."
    (request,) = service.requests
    assert (request.refused, request.model, request.file_name, request.file_type, request.audio) == (
        "",
        "whisper-large-v3",
        "voice.ogg",
        "audio/ogg",
        OGG,
    )
    assert request.headers["authorization"] == "Bearer sk-test"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (
            Failure.status(500, "The server had an error while processing your request."),
            "the transcription service answered 500 Internal Server Error: The server had an error while processing",
        ),
        (
            Failure.status(429, "Rate limit reached for whisper-1"),
            "the transcription service answered 429 Too Many Requests: Rate limit reached for whisper-1",
        ),
        (Failure.never_answers(), "the transcription service did not answer within 1 s"),
    ],
)
async def test_every_failure_says_what_went_wrong(
    service: FakeTranscriptionServer, transcriber: Transcriber, answer: Failure, reason: str
) -> None:
    service.enqueue(answer)
    with pytest.raises(TranscriptionError) as caught:
        await transcriber.transcribe(OGG, name="", mime="audio/ogg")
    assert str(caught.value).startswith(reason)


async def test_a_refused_key_and_an_unknown_format_are_named(service: FakeTranscriptionServer) -> None:
    wrong = Transcriber(TranscriptionSettings(provider="custom", base_url=service.base_url, api_key="sk-wrong"))
    try:
        with pytest.raises(TranscriptionError, match=r"answered 401 Unauthorized: Incorrect API key provided"):
            await wrong.transcribe(OGG, name="", mime="audio/ogg")
    finally:
        await wrong.aclose()
    right = Transcriber(TranscriptionSettings(provider="custom", base_url=service.base_url, api_key="sk-test"))
    try:
        with pytest.raises(TranscriptionError, match=r"answered 400 Bad Request: Invalid file format"):
            await right.transcribe(b"MZ\x90\x00", name="setup.exe", mime="application/x-msdownload")
    finally:
        await right.aclose()


async def test_an_unreachable_service_is_named() -> None:
    gone = Transcriber(TranscriptionSettings(provider="custom", base_url="http://127.0.0.1:9/v1"))
    try:
        with pytest.raises(
            TranscriptionError, match=r"^the transcription service could not be reached \(ConnectError\)"
        ):
            await gone.transcribe(OGG, name="", mime="audio/ogg")
    finally:
        await gone.aclose()


def test_the_uploaded_name_tells_the_format() -> None:
    assert upload_name("", "audio/ogg") == "voice.ogg"
    assert upload_name("", "audio/mpeg") == "voice.mp3"
    assert upload_name("memo", "audio/x-m4a") == "memo.m4a"
    assert upload_name("song.flac", "audio/flac") == "song.flac"
    assert upload_name("../../etc/passwd.wav", "") == "passwd.wav"


# --------------------------------------------------------------------------- the settings


def test_transcription_is_off_by_default_and_then_there_is_no_transcriber() -> None:
    media = load_settings(env={}).media
    assert media == MediaSettings()
    assert (media.max_bytes, media.max_total_bytes, media.max_images_per_request, media.image_max_side) == (
        20 * 1024 * 1024,
        200 * 1024 * 1024,
        4,
        2048,
    )
    assert transcriber_from(media.transcription) is None


def test_provider_openai_takes_the_usual_key_variable_and_openais_endpoint() -> None:
    settings = load_settings(env={"FOLDGATE_MEDIA__TRANSCRIPTION__PROVIDER": "openai", "OPENAI_API_KEY": "sk-env"})
    transcription = settings.media.transcription
    assert transcription.api_key is not None and transcription.api_key.get_secret_value() == "sk-env"
    assert transcription.endpoint == "https://api.openai.com/v1"
    made = transcriber_from(transcription)
    assert made is not None and made.url == "https://api.openai.com/v1/audio/transcriptions"


def test_the_media_keys_come_from_foldgate_variables() -> None:
    media = load_settings(env={"FOLDGATE_MEDIA__MAX_BYTES": "1048576", "FOLDGATE_MEDIA__IMAGE_MAX_SIDE": "1024"}).media
    assert (media.max_bytes, media.image_max_side) == (1048576, 1024)


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"FOLDGATE_MEDIA__TRANSCRIPTION__PROVIDER": "openai"}, "media.transcription.api_key"),
        ({"FOLDGATE_MEDIA__TRANSCRIPTION__PROVIDER": "custom"}, "media.transcription.base_url"),
        ({"FOLDGATE_MEDIA__MAX_BYTES": "300000000"}, "media.max_bytes"),
        ({"FOLDGATE_MEDIA__TRANSCRIPTION__PROVIDER": "whisper"}, "media.transcription.provider"),
    ],
)
def test_unusable_media_settings_are_refused_naming_the_key(env: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env=env)
    assert problem in str(caught.value)
