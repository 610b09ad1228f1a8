"""A transcription endpoint that refuses voice as too long (gpt-4o-transcribe's duration maximum, whisper-1's 413
on size) teaches its limit once: the limit is kept in the window book every process shares, the voice is cut
into pieces under it (PyAV) and heard in order, and the next voice over it is cut before it is sent. Voice that
cannot be cut, or a refusal that names no limit, ends in the refusal's own line. A budget is reserved once for
the whole voice and settled to the pieces heard.

The fake endpoint on loopback decodes what it is sent to measure it and refuses with the providers' wording; the
voice is a tone encoded into OGG/Opus here, as Telegram sends it."""

from __future__ import annotations

import io
import math
from datetime import UTC, datetime
from fractions import Fraction

import av
import pytest
from av.audio.stream import AudioStream

from agent.pricing import transcription_usd
from agent.windows import MemoryWindowBook
from gateway.access.budgets import ChatMeter, MeteredTranscriber
from gateway.config.access import BudgetLimit, BudgetSettings
from gateway.config.models import TranscriptionSettings
from gateway.media.audio_limits import AudioLimit, TooLong, book_model, too_long
from gateway.media.errors import TranscriptionError
from gateway.media.transcribe import Transcriber
from gateway.platforms.base import IncomingMessage
from gateway.store import SessionStore
from gateway.store.spend import SpendStore
from gateway.store.windows import LearnedWindows
from tests.fakes.transcription import Failure, FakeTranscriptionServer, Heard

MODEL = "gpt-4o-transcribe"
RATE = 48_000
TONE_HZ = 400  # 120 samples a period: every 20 ms frame of it is the same


def voice(seconds: float, *, bit_rate: int = 32_000) -> bytes:
    """``seconds`` of a tone as Telegram sends voice: OGG/Opus, mono, 48 kHz."""
    out = io.BytesIO()
    with av.open(out, mode="w", format="ogg") as container:
        stream = container.add_stream("libopus", rate=RATE)
        assert isinstance(stream, AudioStream)
        stream.layout = "mono"
        stream.bit_rate = bit_rate
        size = 960
        period = [round(8_000 * math.sin(2 * math.pi * TONE_HZ * n / RATE)) for n in range(size)]
        samples = b"".join(value.to_bytes(2, "little", signed=True) for value in period)
        for start in range(0, round(seconds * RATE), size):
            frame = av.AudioFrame(format="s16", layout="mono", samples=size)
            frame.planes[0].update(samples)
            frame.sample_rate, frame.pts, frame.time_base = RATE, start, Fraction(1, RATE)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return out.getvalue()


def settings_for(server: FakeTranscriptionServer, model: str = MODEL) -> TranscriptionSettings:
    return TranscriptionSettings(provider="custom", base_url=server.base_url, model=model, timeout_seconds=5)


@pytest.fixture
def book() -> MemoryWindowBook:
    return MemoryWindowBook()


# --------------------------------------------------------------------------- what a refusal says


@pytest.mark.parametrize(
    ("status", "words", "expected"),
    [
        # OpenAI, gpt-4o-transcribe(-diarize): the duration maximum, with the duration it was sent
        (
            400,
            "audio duration 1830.530612 seconds is longer than 1400 seconds which is the maximum for this model",
            TooLong(AudioLimit("seconds", 1400)),
        ),
        (
            400,
            "audio duration 1500.012 seconds is longer than 1400 seconds which is the maximum for this model",
            TooLong(AudioLimit("seconds", 1400)),
        ),
        # OpenAI, whisper-1: the 25 MiB upload limit, as it comes and as relays pass it on
        (
            413,
            "Maximum content size limit (26214400) exceeded (222592852 bytes read)",
            TooLong(AudioLimit("bytes", 26_214_400)),
        ),
        (
            413,
            "413: Maximum content size limit (26214400) exceeded (26294972 bytes read)",
            TooLong(AudioLimit("bytes", 26_214_400)),
        ),
        (
            413,
            (
                "Maximum content size limit (26214400) exceeded (26222592 bytes read) (request id: "
                "20250715191306787520951i8nD7yRe)"
            ),
            TooLong(AudioLimit("bytes", 26_214_400)),
        ),
        # OpenAI-compatible servers that name their own limits
        (413, "Audio file exceeds maximum allowed size (104857600 bytes)", TooLong(AudioLimit("bytes", 104_857_600))),
        (400, "Audio duration must be between 0.1s and 64s", TooLong(AudioLimit("seconds", 64))),
        # too much, but no limit named: Groq's and proxies' 413, vLLM naming only what it was sent
        (413, "Request Entity Too Large", TooLong(None)),
        (
            413,
            (
                "<html><head><title>413 Request Entity Too Large</title></head><body><center><h1>413 Request Entity "
                "Too Large</h1></center><hr><center>cloudflare</center></body></html>"
            ),
            TooLong(None),
        ),
        (400, "Maximum file size exceeded (parameter=audio_filesize_mb, value=27.963909149169922)", TooLong(None)),
        # not about the audio's length or size
        (400, "Audio file might be corrupted or unsupported", None),
        (400, "prompt length must be 896 characters or fewer, but provided prompt contains 904 characters", None),
        (
            400,
            (
                "Invalid file format. Supported formats: ['flac', 'm4a', 'mp3', 'mp4', 'mpeg', 'mpga', 'oga', 'ogg', "
                "'wav', 'webm']"
            ),
            None,
        ),
        (401, "Incorrect API key provided.", None),
        (429, "Rate limit reached for whisper-1 in organization org-x on requests per min (RPM): Limit 50", None),
    ],
)
def test_a_refusal_of_too_much_audio_is_read_with_the_limit_it_names(
    status: int, words: str, expected: TooLong | None
) -> None:
    assert too_long(status, words) == expected


# --------------------------------------------------------------------------- learned once, heard in pieces


async def test_a_long_voice_is_refused_once_and_then_heard_in_pieces_in_order(book: MemoryWindowBook) -> None:
    long_voice = voice(30)
    async with FakeTranscriptionServer(max_seconds=10) as service:
        service.enqueue(Heard("First,"), Heard("the deploy froze"), Heard("at step four."), Heard("Call me."))
        transcriber = Transcriber(settings_for(service), book=book)
        try:
            words = await transcriber.transcribe(long_voice, name="", mime="audio/ogg", seconds=30)
        finally:
            await transcriber.aclose()
    assert words == "First, the deploy froze at step four. Call me."
    refused, *pieces = service.requests
    assert refused.refused.startswith("audio duration 30 seconds is longer than 10 seconds")
    assert (refused.file_name, refused.audio) == ("voice.ogg", long_voice)
    assert [(piece.refused, piece.file_name, piece.file_type) for piece in pieces] == [
        ("", "voice.mp3", "audio/mpeg")
    ] * 4
    heard = [piece.seconds or 0.0 for piece in pieces]
    assert all(seconds <= 9.05 for seconds in heard) and sum(heard) == pytest.approx(30, abs=0.2)
    assert book.learned(service.base_url, book_model(MODEL, "seconds")) == 10


async def test_another_process_on_the_same_book_cuts_before_sending_and_is_never_refused(
    redis, key_prefix, channel
) -> None:
    first_book, second_book = LearnedWindows(channel, key_prefix), LearnedWindows(channel, key_prefix)
    async with FakeTranscriptionServer(max_seconds=10) as service:
        first = Transcriber(settings_for(service), book=first_book)
        second = Transcriber(settings_for(service), book=second_book)
        try:
            await first.transcribe(voice(20), name="", mime="audio/ogg")
            assert [bool(request.refused) for request in service.requests] == [True, False, False, False]
            service.requests.clear()
            await second_book.refresh(force=True)  # what a turn of the other process reads before it starts
            service.enqueue(Heard("one"), Heard("two"), Heard("three"))
            words = await second.transcribe(voice(25), name="", mime="audio/ogg")
        finally:
            await first.aclose()
            await second.aclose()
    assert words == "one two three"
    assert [(request.refused, request.file_name) for request in service.requests] == [("", "voice.mp3")] * 3
    assert second_book.learned(service.base_url, book_model(MODEL, "seconds")) == 10


async def test_a_voice_under_the_limit_is_sent_whole(book: MemoryWindowBook) -> None:
    short = voice(5)
    async with FakeTranscriptionServer(max_seconds=10) as service:
        await book.learn(service.base_url, book_model(MODEL, "seconds"), 10)
        service.enqueue(Heard("short and whole"))
        transcriber = Transcriber(settings_for(service), book=book)
        try:
            assert await transcriber.transcribe(short, name="", mime="audio/ogg") == "short and whole"
        finally:
            await transcriber.aclose()
    (request,) = service.requests
    assert (request.refused, request.file_name, request.audio) == ("", "voice.ogg", short)


async def test_a_size_limit_is_learned_from_whisper_1s_413_and_kept_under(book: MemoryWindowBook) -> None:
    heavy = voice(24, bit_rate=64_000)  # about 190 kB
    async with FakeTranscriptionServer(max_bytes=60_000) as service:
        transcriber = Transcriber(settings_for(service, "whisper-1"), book=book)
        again = Transcriber(settings_for(service, "whisper-1"), book=book)
        try:
            service.enqueue(Heard("a"), Heard("b"))
            assert await transcriber.transcribe(heavy, name="memo.ogg", mime="audio/ogg") == "a b"
            assert book.learned(service.base_url, book_model("whisper-1", "bytes")) == 60_000
            assert [request.refused[:29] for request in service.requests] == ["Maximum content size limit (6", "", ""]
            service.requests.clear()
            assert await again.transcribe(heavy, name="memo.ogg", mime="audio/ogg") == "ok ok"
        finally:
            await transcriber.aclose()
            await again.aclose()
    assert [(request.refused, request.file_name) for request in service.requests] == [("", "voice.mp3")] * 2
    assert all(len(request.audio) < 60_000 for request in service.requests)


# --------------------------------------------------------------------------- when it cannot be done


async def test_undecodable_audio_refused_as_too_long_gets_the_refusals_own_line(book: MemoryWindowBook) -> None:
    garbage = b"OggS\x00\x02" + bytes(range(200)) * 50
    async with FakeTranscriptionServer() as service:
        service.enqueue(
            Failure.status(
                400,
                "audio duration 1830.530612 seconds is longer than 1400 seconds which is the maximum for this model",
            )
        )
        transcriber = Transcriber(settings_for(service), book=book)
        try:
            with pytest.raises(TranscriptionError) as caught:
                await transcriber.transcribe(garbage, name="", mime="audio/ogg")
        finally:
            await transcriber.aclose()
    assert str(caught.value) == (
        "the transcription service answered 400 Bad Request: audio duration 1830.530612 "
        "seconds is longer than 1400 seconds which is the maximum for this model"
    )
    assert len(service.requests) == 1
    assert book.learned(service.base_url, book_model(MODEL, "seconds")) == 1400  # learned all the same


async def test_a_refusal_that_names_no_limit_halves_what_was_refused_until_it_is_heard(book: MemoryWindowBook) -> None:
    """A proxy's bare 413 says nothing of the limit: half of what it refused is tried, then half again, and the
    voice is heard in pieces; what it took is kept for every later voice."""
    whole = voice(30)
    async with FakeTranscriptionServer(max_bytes=len(whole) // 3, names_limit=False) as service:
        transcriber = Transcriber(settings_for(service, "whisper-large-v3"), book=book)
        try:
            assert await transcriber.transcribe(whole, name="", mime="audio/ogg")
        finally:
            await transcriber.aclose()
    refused = [request for request in service.requests if request.refused]
    assert 1 <= len(refused) <= 3
    learned = book.learned(service.base_url, book_model("whisper-large-v3", "bytes"))
    assert learned is not None and learned <= len(whole) // 2
    assert all(len(request.audio) <= len(whole) // 3 for request in service.requests if not request.refused)


async def test_a_refusal_that_names_no_limit_is_told_after_three_halvings(book: MemoryWindowBook) -> None:
    async with FakeTranscriptionServer(max_bytes=64, names_limit=False) as service:
        transcriber = Transcriber(settings_for(service, "whisper-large-v3"), book=book)
        try:
            with pytest.raises(
                TranscriptionError,
                match=r"^the transcription service answered 413 Request Entity "
                r"Too Large",
            ):
                await transcriber.transcribe(voice(3), name="", mime="audio/ogg")
        finally:
            await transcriber.aclose()
    assert len(service.requests) <= 4


# --------------------------------------------------------------------------- metering


def from_ann() -> IncomingMessage:
    return IncomingMessage(
        platform="local", chat_id="desk", user_id="ann", user_name="Ann", update_id="desk-1", text=""
    )


async def spent_today(store: SessionStore, key_prefix: str) -> tuple[float, float]:
    period = datetime.now(UTC).strftime("%Y-%m-%d")
    spent = await SpendStore(store.channel, key_prefix).spent("chat:local:desk", period)
    return spent.usd, spent.reserved_usd


async def test_a_voice_heard_in_pieces_is_reserved_once_and_settled_to_the_pieces(store, key_prefix) -> None:
    meter = ChatMeter(
        SpendStore(store.channel, key_prefix),
        BudgetSettings(per_chat=BudgetLimit(usd=5, tokens=None, period="day")),
        from_ann(),
        cache_ttl="5m",
        notes=[],
    )
    async with FakeTranscriptionServer(max_seconds=10) as service:
        transcriber = Transcriber(settings_for(service, "whisper-1"), book=MemoryWindowBook())
        metered = MeteredTranscriber(transcriber, meter)
        try:
            assert await metered.transcribe(voice(30), name="", mime="audio/ogg", seconds=30) == "ok ok ok ok"
            after_one = await spent_today(store, key_prefix)
            service.enqueue(
                Heard("heard"), Failure.status(500, "The server had an error while processing your request.")
            )
            with pytest.raises(TranscriptionError, match="answered 500"):
                await metered.transcribe(voice(30), name="", mime="audio/ogg", seconds=30)
            after_two = await spent_today(store, key_prefix)
        finally:
            await transcriber.aclose()
    pieces = [request for request in service.requests if not request.refused]
    assert len(service.requests) - len(pieces) == 1  # refused once, by the first voice; the second was cut first
    assert after_one[0] == pytest.approx(transcription_usd("whisper-1", 30), rel=0.01)  # $0.003: the four pieces
    assert after_one[1] == 0 and after_two[1] == 0  # every reservation settled
    # the second voice: its first piece heard and billed, the second failed and cost nothing
    assert after_two[0] - after_one[0] == pytest.approx(transcription_usd("whisper-1", 9), rel=0.01)
