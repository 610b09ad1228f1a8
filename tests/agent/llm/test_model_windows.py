"""The window a provider itself states for a model: read from each server's real answer, never an exception.

Every server here is a real one on loopback (tests/fakes/model_catalogs.py) speaking the shape of
OpenRouter, vLLM, llama.cpp, LM Studio, Ollama, Anthropic or a plain OpenAI-compatible server, and the
client is foldgate's own HTTP stack.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from agent.llm.http import open_http_client
from agent.llm.model_windows import ReportedWindow, reported_window
from tests.fakes.model_catalogs import CatalogFlavor, FakeModelCatalog, ServedModel, closed_port

KEY = "sk-test-key"
AUTH = {"authorization": f"Bearer {KEY}"}
ANTHROPIC_HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}


@pytest_asyncio.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    client = open_http_client()
    try:
        yield client
    finally:
        await client.aclose()


async def ask(
    http: httpx.AsyncClient,
    server: FakeModelCatalog,
    model: str,
    *,
    headers: dict[str, str] | None = None,
    dialect: str = "openai",
    timeout: float = 3.0,
) -> ReportedWindow | None:
    return await reported_window(
        http, server.base_url, model, headers=AUTH if headers is None else headers, dialect=dialect, timeout=timeout
    )


# ------------------------------------------------------------------------------ OpenRouter and vLLM


async def test_openrouter_states_the_window_in_its_model_list(http: httpx.AsyncClient) -> None:
    models = [
        ServedModel("meta-llama/llama-3.3-70b-instruct", trained=131_072, loaded=65_536),
        ServedModel("qwen/qwen3-32b", trained=40_960),
    ]
    async with FakeModelCatalog("openrouter", models, api_key=KEY) as server:
        found = await ask(http, server, "meta-llama/llama-3.3-70b-instruct")
        assert found == ReportedWindow(131_072, "OpenRouter /api/v1/models context_length")
        assert server.paths == ["/api/v1/models"]  # one request: the first answer ends the search


async def test_openrouter_top_provider_stands_in_for_a_nonsense_context_length(http: httpx.AsyncClient) -> None:
    model = ServedModel("mistralai/mistral-small", trained=32_768, fields={"context_length": 0})
    async with FakeModelCatalog("openrouter", [model], api_key=KEY) as server:
        found = await ask(http, server, "mistralai/mistral-small")
        assert found == ReportedWindow(32_768, "OpenRouter /api/v1/models top_provider.context_length")


async def test_openrouter_routing_suffix_finds_the_model_itself_not_a_variant(http: httpx.AsyncClient) -> None:
    models = [
        ServedModel("deepseek/deepseek-chat-v3:free", trained=16_384),
        ServedModel("deepseek/deepseek-chat-v3", trained=163_840),
    ]
    async with FakeModelCatalog("openrouter", models, api_key=KEY) as server:
        nitro = await ask(http, server, "deepseek/deepseek-chat-v3:nitro")
        free = await ask(http, server, "deepseek/deepseek-chat-v3:free")
    assert nitro is not None and nitro.tokens == 163_840
    assert free is not None and free.tokens == 16_384


async def test_vllm_states_max_model_len(http: httpx.AsyncClient) -> None:
    async with FakeModelCatalog("vllm", [ServedModel("Qwen/Qwen2.5-7B-Instruct", trained=32_768)]) as server:
        found = await ask(http, server, "Qwen/Qwen2.5-7B-Instruct")
        assert found == ReportedWindow(32_768, "vLLM /v1/models max_model_len")
        assert server.paths == ["/v1/models"]


async def test_exact_id_wins_over_a_looser_match(http: httpx.AsyncClient) -> None:
    models = [ServedModel("qwen2.5-7b", trained=8_192), ServedModel("Qwen/qwen2.5-7b", trained=32_768)]
    async with FakeModelCatalog("vllm", models) as server:
        prefixed = await ask(http, server, "Qwen/qwen2.5-7b")
        plain = await ask(http, server, "qwen2.5-7b")
    assert prefixed is not None and prefixed.tokens == 32_768
    assert plain is not None and plain.tokens == 8_192


async def test_a_name_without_its_provider_prefix_or_case_still_matches(http: httpx.AsyncClient) -> None:
    async with FakeModelCatalog("vllm", [ServedModel("Qwen/Qwen2.5-7B-Instruct", trained=32_768)]) as server:
        found = await ask(http, server, "qwen2.5-7b-instruct")
    assert found == ReportedWindow(32_768, "vLLM /v1/models max_model_len")


async def test_a_bare_name_two_providers_share_matches_neither(http: httpx.AsyncClient) -> None:
    models = [ServedModel("org-a/foo", trained=8_192), ServedModel("org-b/foo", trained=32_768)]
    async with FakeModelCatalog("vllm", models) as server:
        assert await ask(http, server, "org-b/foo") == ReportedWindow(32_768, "vLLM /v1/models max_model_len")
        assert await ask(http, server, "foo") is None


# ------------------------------------------------------------------------------ llama.cpp


async def test_llama_cpp_slot_window_from_props_beats_the_trained_length(http: httpx.AsyncClient) -> None:
    model = ServedModel("../models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", trained=131_072, loaded=16_384)
    async with FakeModelCatalog("llamacpp", [model], slots=2) as server:
        found = await ask(http, server, "llama-3.1-8b")  # a single-model server answers to any name
        assert found == ReportedWindow(8_192, "llama.cpp /props n_ctx")
        assert server.paths == ["/v1/models", "/props"]


async def test_llama_cpp_without_props_falls_back_to_the_list_meta(http: httpx.AsyncClient) -> None:
    model = ServedModel("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", trained=131_072, loaded=16_384)
    async with FakeModelCatalog("llamacpp", [model], props=False) as server:
        found = await ask(http, server, "Meta-Llama-3.1-8B-Instruct-Q4_K_M")
    assert found == ReportedWindow(16_384, "llama.cpp /v1/models meta.n_ctx")


async def test_older_llama_cpp_lists_only_the_trained_length_as_provisional(http: httpx.AsyncClient) -> None:
    model = ServedModel("model.gguf", trained=131_072, loaded=16_384)
    async with FakeModelCatalog("llamacpp", [model], props=False, meta_n_ctx=False) as server:
        found = await ask(http, server, "model")
    assert found == ReportedWindow(131_072, "llama.cpp /v1/models meta.n_ctx_train", provisional=True)


async def test_llama_cpp_router_is_asked_about_the_named_model_without_loading_it(http: httpx.AsyncClient) -> None:
    models = [
        ServedModel("ggml-org/gemma-3-4b-it-GGUF:Q4_K_M", trained=131_072, loaded=8_192),
        ServedModel("ggml-org/Qwen3-8B-GGUF:Q4_K_M", trained=40_960),
    ]
    async with FakeModelCatalog("llamacpp", models, llama_router=True) as server:
        loaded = await ask(http, server, "ggml-org/gemma-3-4b-it-GGUF:Q4_K_M")
        unloaded = await ask(http, server, "ggml-org/Qwen3-8B-GGUF:Q4_K_M")
        assert loaded == ReportedWindow(8_192, "llama.cpp /props n_ctx")
        assert unloaded is None  # nothing known until the router starts it, and asking must not start it
        props = [path for path in server.paths if path.startswith("/props")]
        assert props == ["/props?model=ggml-org/gemma-3-4b-it-GGUF:Q4_K_M&autoload=false"]


# ------------------------------------------------------------------------------ LM Studio


async def test_lm_studio_loaded_context_is_the_limit(http: httpx.AsyncClient) -> None:
    models = [ServedModel("qwen/qwen3-4b", trained=32_768, loaded=4_096), ServedModel("gemma-3-12b", trained=131_072)]
    async with FakeModelCatalog("lmstudio", models) as server:
        found = await ask(http, server, "qwen/qwen3-4b")
        assert found == ReportedWindow(4_096, "LM Studio /api/v0/models loaded_context_length")
        assert server.paths == ["/v1/models", "/api/v0/models"]  # its own API first: its list names it
        unloaded = await ask(http, server, "gemma-3-12b")
    assert unloaded == ReportedWindow(
        131_072, "LM Studio /api/v0/models max_context_length (model not loaded)", provisional=True
    )


# ------------------------------------------------------------------------------ Ollama


async def test_ollama_loaded_model_reports_its_runtime_window(http: httpx.AsyncClient) -> None:
    model = ServedModel("qwen2.5:latest", trained=32_768, loaded=8_192, num_ctx=16_384)
    async with FakeModelCatalog("ollama", [model]) as server:
        found = await ask(http, server, "qwen2.5")  # no tag: Ollama's :latest
        assert found == ReportedWindow(8_192, "Ollama /api/ps context_length")
        assert "/api/show" not in server.paths


async def test_ollama_num_ctx_parameter_capped_at_the_trained_length(http: httpx.AsyncClient) -> None:
    models = [
        ServedModel("qwen2.5:7b", trained=32_768, num_ctx=16_384),
        ServedModel("tiny:latest", trained=2_048, num_ctx=8_192),
    ]
    async with FakeModelCatalog("ollama", models) as server:
        assert await ask(http, server, "qwen2.5:7b") == ReportedWindow(16_384, "Ollama /api/show num_ctx")
        assert await ask(http, server, "tiny") == ReportedWindow(2_048, "Ollama /api/show num_ctx")


@pytest.mark.parametrize(("version", "expected"), [("0.12.6", 4_096), ("0.6.5", 2_048), ("not a version", 4_096)])
async def test_ollama_default_window_for_a_model_not_loaded(
    http: httpx.AsyncClient, version: str, expected: int
) -> None:
    async with FakeModelCatalog(
        "ollama", [ServedModel("llama3.2:latest", trained=131_072)], ollama_version=version
    ) as server:
        found = await ask(http, server, "llama3.2:latest")
    assert found == ReportedWindow(expected, "Ollama default num_ctx (model not loaded)", provisional=True)


async def test_ollama_cloud_model_runs_with_its_full_length(http: httpx.AsyncClient) -> None:
    async with FakeModelCatalog("ollama", [ServedModel("gpt-oss:120b-cloud", trained=131_072, remote=True)]) as server:
        found = await ask(http, server, "gpt-oss:120b-cloud")
    assert found == ReportedWindow(131_072, "Ollama /api/show context_length (cloud model)")


# ------------------------------------------------------------------------------ Anthropic and plain servers


async def test_anthropic_states_max_input_tokens(http: httpx.AsyncClient) -> None:
    sonnet = ServedModel("claude-sonnet-4-5", trained=200_000)
    async with FakeModelCatalog("anthropic", [sonnet], api_key=KEY) as server:
        found = await ask(http, server, "claude-sonnet-4-5", headers=ANTHROPIC_HEADERS, dialect="anthropic")
        assert found == ReportedWindow(200_000, "Anthropic /v1/models max_input_tokens")
        zero = ServedModel("claude-haiku-4-5", fields={"max_input_tokens": 0})
        server.models.append(zero)
        assert await ask(http, server, "claude-haiku-4-5", headers=ANTHROPIC_HEADERS, dialect="anthropic") is None
        assert (
            await ask(
                http, server, "claude-sonnet-4-5", headers={"anthropic-version": "2023-06-01"}, dialect="anthropic"
            )
            is None
        )


async def test_a_plain_openai_compatible_server_reports_nothing(http: httpx.AsyncClient) -> None:
    async with FakeModelCatalog("openai", [ServedModel("company-llm")]) as server:
        assert await ask(http, server, "company-llm") is None
        # on a private network both local servers' own APIs are tried, and each answers 404
        assert server.paths == ["/v1/models", "/api/v0/models", "/api/ps"]


# ------------------------------------------------------------------------------ faults: None, never an exception


async def test_unreachable_port_is_none(http: httpx.AsyncClient) -> None:
    found = await reported_window(http, f"http://127.0.0.1:{closed_port()}/v1", "any-model", headers={})
    assert found is None


async def test_refused_key_is_none_and_nothing_more_is_asked(http: httpx.AsyncClient) -> None:
    async with FakeModelCatalog("vllm", [ServedModel("m", trained=32_768)], api_key=KEY) as server:
        assert await ask(http, server, "m", headers={"authorization": "Bearer wrong"}) is None
        assert server.paths == ["/v1/models"]


@pytest.mark.parametrize("flavor", ["openrouter", "vllm", "llamacpp", "lmstudio", "ollama"])
async def test_malformed_json_is_none(http: httpx.AsyncClient, flavor: CatalogFlavor) -> None:
    model = ServedModel("m:latest", trained=32_768, loaded=8_192, num_ctx=4_096)
    async with FakeModelCatalog(flavor, [model], malformed=True) as server:
        assert await ask(http, server, "m:latest") is None


@pytest.mark.parametrize("flavor", ["openrouter", "vllm", "lmstudio", "ollama"])
async def test_a_list_without_the_model_is_none(http: httpx.AsyncClient, flavor: CatalogFlavor) -> None:
    async with FakeModelCatalog(flavor, [ServedModel("other:latest", trained=32_768, loaded=8_192)]) as server:
        assert await ask(http, server, "wanted-model") is None


@pytest.mark.parametrize("nonsense", [0, -1, 10**12, "32768", True, 12.5, None])
async def test_a_nonsense_number_is_none(http: httpx.AsyncClient, nonsense: object) -> None:
    model = ServedModel("m", fields={"max_model_len": nonsense})
    async with FakeModelCatalog("vllm", [model]) as server:
        assert await ask(http, server, "m") is None


async def test_nonsense_at_ollama_falls_through_to_the_next_source(http: httpx.AsyncClient) -> None:
    model = ServedModel("qwen2.5:latest", trained=32_768, loaded=8_192, num_ctx=16_384, fields={"context_length": -5})
    async with FakeModelCatalog("ollama", [model]) as server:
        found = await ask(http, server, "qwen2.5")
    assert found == ReportedWindow(16_384, "Ollama /api/show num_ctx")


async def test_a_silent_server_costs_one_timeout_not_one_per_source(http: httpx.AsyncClient) -> None:
    async with FakeModelCatalog("ollama", [ServedModel("m:latest")], hang=True) as server:
        assert await ask(http, server, "m", timeout=0.3) is None
        assert server.paths == ["/v1/models"]
