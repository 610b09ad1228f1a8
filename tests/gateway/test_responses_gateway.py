"""The Responses route inside the gateway: wiring, the store keeping replay data, and the relay gate (SPEC S7.2)."""

from __future__ import annotations

from agent.llm.responses import REPLAY_KEY, ResponsesClient
from gateway.agents import AgentBuilder, resolve_api_mode
from gateway.config import Settings
from tests.fakes.gateway import message, running_gateway
from tests.fakes.llm_server import Reply
from tests.fakes.responses_server import FakeResponsesServer


def test_auto_api_mode_uses_responses_for_the_codex_route_only():
    assert resolve_api_mode("openai-codex", "auto") == "responses"
    assert resolve_api_mode("openai", "auto") == "chat"
    assert resolve_api_mode("openai", "responses") == "responses"


async def test_the_codex_route_streams_without_a_token_limit_and_may_compact_natively(tmp_path):
    settings = Settings(
        model={"name": "gpt-5.6-sol", "provider": "openai-codex"},
        compression={"codex_responses_native": True},
        platforms={"local": {"enabled": True}},
        gateway={"home": str(tmp_path)},
    )
    builder = AgentBuilder(settings)
    client = builder.chat_model
    assert isinstance(client, ResponsesClient)
    assert (client.route, client.stream, client.send_token_limit) == ("openai-codex", True, False)
    assert client.native_eligible("gpt-5.6-sol") and not client.native_eligible("gpt-5.5")
    assert isinstance(builder.summarizer.client, ResponsesClient) and not builder.summarizer.client.native_compaction
    assert builder.caching_status == "💾 Prompt caching: DISABLED (api_mode responses has no cache_control)"
    await builder.aclose()


async def test_a_relay_speaking_responses_gets_no_compaction_field(tmp_path, redis, redis_url, key_prefix):
    async with FakeResponsesServer(name="relay") as server:
        server.default = Reply.answer("fine")
        settings = Settings(
            redis={"url": redis_url, "key_prefix": key_prefix},
            model={
                "name": "gpt-5.6",
                "provider": "openai",
                "api_key": "k",
                "api_mode": "responses",
                "base_url": server.responses_base_url,
            },
            compression={"codex_responses_native": True},
            platforms={"local": {"enabled": True}},
            gateway={"home": str(tmp_path)},
        )
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            for index in range(2):
                await runner.intake(message("c", f"u{index}", f"hello {index}"))
                await runner.wait_idle()
    assert [text for _, text in adapter.sent] == ["fine", "fine"]
    # Besides its answers, the relay was asked at start (GETs) which window gpt-5.6 has there.
    turns = [request for request in server.requests if request.method == "POST"]
    assert all(request.path == "/v1/responses" for request in turns)
    assert all("context_management" not in request.body for request in turns)
    assert [item["role"] for item in turns[1].body["input"]] == ["user", "assistant", "user"]


async def test_the_store_keeps_the_compaction_item_and_later_turns_replay_it(store):
    async with FakeResponsesServer(name="direct") as server:
        server.default = Reply.answer("stored")
        client = ResponsesClient(
            server.responses_base_url, api_key="k", route="openai", native_compaction=True, compact_threshold=50
        )
        session = client.for_session("local:c/s1")
        chat = "local:c"
        sid = await store.current_session(chat)
        lock = await store.acquire_lock(chat, 30)
        first_user = {"role": "user", "content": "a long opening message " * 40}
        async with client:
            completion = await session.complete([first_user], model="gpt-5.6", max_tokens=20)
            assert completion.native_compactions == 1  # the server folded the context: the operator view marks it
            answer = completion.as_message()
            await store.append(chat, sid, [first_user, answer], lock=lock)
            history = await store.active(chat, sid)
            assert history[1][REPLAY_KEY] == answer[REPLAY_KEY]  # persisted like any "_" key
            await session.complete([*history, {"role": "user", "content": "next"}], model="gpt-5.6", max_tokens=20)
        await store.release_lock(lock)
    second = server.requests[1].body["input"]
    assert second[0]["type"] == "compaction" and second[0]["encrypted_content"].startswith("enc::direct::")
    assert "a long opening message" not in server.requests[1].text
