"""The window and prompt size foldgate reads out of real context-length refusals, provider by provider.

Every message below is a provider's own wording, copied from public bug reports and from the servers'
sources, inside a body of the shape that server sends (its status and JSON as they arrive; a few ids
and the numbers of relayed bodies are illustrative). Where only the sentence is on record, the
sentence alone is tested. The numbers each must yield are checked three ways: parsed from the raw body, carried by
the ContextTooLong that ``error_for_status`` builds from an HTTP response, and carried by the one
``classify_failure`` builds from the provider's message alone (a mid-stream error has no more).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx
import pytest

from agent.llm import anthropic, openai_chat
from agent.llm.codex_process import CodexAppServer
from agent.llm.errors import (
    ContextTooLong,
    ProviderRejected,
    ProviderUnavailable,
    RateLimited,
    classify_failure,
)
from agent.llm.status_errors import error_for_status
from agent.llm.window_refusals import WindowRefusal, read_window_refusal

_URL = "https://provider.test/v1/chat/completions"
_NONE = WindowRefusal()


@dataclass(frozen=True)
class Refusal:
    """One provider's refusal: its HTTP status and body, and the numbers it names."""

    status: int
    body: str
    expected: WindowRefusal
    #: What the error's message alone names, when the body holds more than its message (None: the same).
    from_message: WindowRefusal | None = None
    #: Whether the refusal is relayed inside the body, its message saying nothing of the window.
    relayed: bool = False


CORPUS = {
    # --- OpenAI, Chat Completions -------------------------------------------------------------------
    "openai-messages": Refusal(
        400,
        (
            '{"error":{"message":"This model\'s maximum context length is 128000 tokens. However, your messages '
            'resulted in 204308 tokens. Please reduce the length of the messages.","type":"invalid_request_error",'
            '"param":"messages","code":"context_length_exceeded"}}'
        ),
        WindowRefusal(window=128_000, prompt_tokens=204_308),
    ),
    # The completion's reserve breaks the window: the prompt is the messages' share only.
    "openai-messages-and-completion": Refusal(
        400,
        """{
  "error": {
    "message": "This model's maximum context length is 4097 tokens. However, you requested 4120 tokens (3120 in \
the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
    "type": "invalid_request_error",
    "param": "messages",
    "code": "context_length_exceeded"
  }
}
""",
        WindowRefusal(window=4097, prompt_tokens=3120),
    ),
    # Function definitions count as prompt.
    "openai-messages-and-functions": Refusal(
        400,
        (
            '{"error":{"message":"This model\'s maximum context length is 128000 tokens. However, your messages '
            "resulted in 202868 tokens (202767 in the messages, 101 in the functions). Please reduce the length of "
            'the messages or functions.","type":"invalid_request_error","param":"messages",'
            '"code":"context_length_exceeded"}}'
        ),
        WindowRefusal(window=128_000, prompt_tokens=202_868),
    ),
    "openai-messages-functions-completion": Refusal(
        400,
        (
            '{"error":{"message":"This model\'s maximum context length is 8192 tokens. However, you requested 9455 '
            "tokens (2426 in the messages, 2933 in the functions, and 4096 in the completion). Please reduce the "
            'length of the messages, functions, or completion.","type":"invalid_request_error","param":"messages",'
            '"code":"context_length_exceeded"}}'
        ),
        WindowRefusal(window=8192, prompt_tokens=2426 + 2933),
    ),
    # The legacy Completions endpoint's wording.
    "openai-completions-legacy": Refusal(
        400,
        (
            '{"error":{"message":"This model\'s maximum context length is 4097 tokens, however you requested 6539 '
            "tokens (6283 in your prompt; 256 for the completion). Please reduce your prompt; or completion "
            'length.","type":"invalid_request_error","param":null,"code":null}}'
        ),
        WindowRefusal(window=4097, prompt_tokens=6283),
    ),
    # The GPT-5 family caps the input on its own: that cap is not the whole window.
    "openai-configured-input-limit": Refusal(
        400,
        (
            '{"error":{"message":"Input tokens exceed the configured limit of 922000 tokens. Your messages resulted '
            'in 1084698 tokens. Please reduce the length of the messages.","type":"invalid_request_error",'
            '"param":"messages","code":"context_length_exceeded"}}'
        ),
        WindowRefusal(prompt_tokens=1_084_698, input_limit=922_000),
    ),
    # --- OpenAI, Responses API: names no number -----------------------------------------------------
    "openai-responses": Refusal(
        400,
        (
            '{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and '
            'try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}'
        ),
        _NONE,
    ),
    # --- Groq: the OpenAI code, no number -----------------------------------------------------------
    "groq": Refusal(
        400,
        (
            '{"error":{"message":"Please reduce the length of the messages or completion.",'
            '"type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}'
        ),
        _NONE,
    ),
    # --- Anthropic, Messages API ---------------------------------------------------------------------
    "anthropic-prompt-too-long": Refusal(
        400,
        (
            '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 219898 tokens > '
            '200000 maximum"},"request_id":"req_011CVjxiYzEFcAQC4Fk87zw2"}'
        ),
        WindowRefusal(window=200_000, prompt_tokens=219_898),
    ),
    "anthropic-input-and-max-tokens": Refusal(
        400,
        (
            '{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` '
            'exceed context limit: 178959 + 64000 > 200000, decrease input length or `max_tokens` and try again"},'
            '"request_id":"req_011CUB2XUHWkFnQzxcKBbjpF"}'
        ),
        WindowRefusal(window=200_000, prompt_tokens=178_959),
    ),
    # --- vLLM ----------------------------------------------------------------------------------------
    # 2024 (0.4): a top-level error object, and the OpenAI sentence.
    "vllm-old": Refusal(
        400,
        (
            '{"object":"error","message":"This model\'s maximum context length is 4096 tokens. However, you requested '
            "5060 tokens (4036 in the messages, 1024 in the completion). Please reduce the length of the messages or "
            'completion.","type":"BadRequestError","param":null,"code":400}'
        ),
        WindowRefusal(window=4096, prompt_tokens=4036),
    ),
    # 2025 releases: max_tokens does not fit beside the prompt (the trailing "None" is vLLM's).
    "vllm-max-tokens-too-large": Refusal(
        400,
        (
            "{\"error\":{\"message\":\"'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's "
            "maximum context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). "
            'None","type":"BadRequestError","param":null,"code":400}}'
        ),
        WindowRefusal(window=4096, prompt_tokens=2778),
    ),
    # 2026 releases (0.20 among them).
    "vllm-prompt-contains-at-least": Refusal(
        400,
        (
            '{"error":{"message":"This model\'s maximum context length is 40960 tokens. However, you requested 0 '
            "output tokens and your prompt contains at least 40961 input tokens, for a total of at least 40961 "
            "tokens. Please reduce the length of the input prompt or the number of requested output tokens. "
            '(parameter=input_tokens, value=40961)","type":"BadRequestError","param":"input_tokens","code":400}}'
        ),
        WindowRefusal(window=40_960, prompt_tokens=40_961),
    ),
    # --- llama.cpp server -----------------------------------------------------------------------------
    # September 2025 (the error type's first release): the numbers are only in the fields.
    "llama.cpp-2025-fields-only": Refusal(
        400,
        (
            '{"error":{"code":400,"message":"the request exceeds the available context size. try increasing the '
            'context size or enable context shift","type":"exceed_context_size_error","n_prompt_tokens":14429,'
            '"n_ctx":8192}}'
        ),
        WindowRefusal(window=8192, prompt_tokens=14_429),
        from_message=_NONE,
    ),
    # 2026: the sentence names them too.
    "llama.cpp-2026": Refusal(
        400,
        (
            '{"error":{"code":400,"message":"request (25837 tokens) exceeds the available context size (25088 '
            'tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":25837,"n_ctx":25088}}'
        ),
        WindowRefusal(window=25_088, prompt_tokens=25_837),
    ),
    # Before the error type existed, the same refusal came as an HTTP 500.
    "llama.cpp-before-the-type": Refusal(
        500,
        (
            '{"error":{"code":500,"message":"the request exceeds the available context size. try increasing the '
            'context size or enable context shift","type":"server_error"}}'
        ),
        _NONE,
    ),
    # --- Ollama --------------------------------------------------------------------------------------
    # Up to 0.29 (its own runners, truncation off): OpenAI-compatible endpoint, then the native one.
    "ollama-openai-runner": Refusal(
        400,
        (
            '{"error":{"message":"the input length exceeds the context length","type":"invalid_request_error",'
            '"param":null,"code":null}}'
        ),
        _NONE,
    ),
    "ollama-native-runner": Refusal(400, '{"error":"the input length exceeds the context length"}', _NONE),
    # 0.30 and later (llama-server underneath): a prompt its context shift may not cut.
    "ollama-openai-context-shift-off": Refusal(
        400,
        (
            '{"error":{"message":"the prompt is longer than the context length currently available to the model; '
            "shorten the prompt, adjust the context length in settings, or use a model with a longer context "
            'length","type":"invalid_request_error","param":null,"code":null}}'
        ),
        _NONE,
    ),
    # 0.30 and later: llama-server's own body, relayed as the error string (native) or message (OpenAI).
    "ollama-native-relays-llama-server": Refusal(
        400,
        (
            r'{"error":"{\"error\":{\"code\":400,\"message\":\"request (9412 tokens) exceeds the available context '
            r"size (8192 tokens), try increasing it\",\"type\":\"exceed_context_size_error\",\"n_prompt_tokens\":9412,"
            r'\"n_ctx\":8192}}"}'
        ),
        WindowRefusal(window=8192, prompt_tokens=9412),
    ),
    "ollama-openai-relays-llama-server": Refusal(
        400,
        (
            r'{"error":{"message":"{\"error\":{\"code\":400,\"message\":\"the request exceeds the available context '
            r"size, try increasing it\",\"type\":\"exceed_context_size_error\",\"n_prompt_tokens\":9412,"
            r'\"n_ctx\":8192}}","type":"invalid_request_error","param":null,"code":null}}'
        ),
        WindowRefusal(window=8192, prompt_tokens=9412),
    ),
    # --- OpenRouter ----------------------------------------------------------------------------------
    # The prompt is the input parts ("of text input", "of tool input"); "in the output" is the answer's reserve.
    "openrouter-text": Refusal(
        400,
        (
            '{"error":{"message":"This endpoint\'s maximum context length is 131072 tokens. However, you requested '
            "about 141607 tokens (10535 of text input, 131072 in the output). Please reduce the length of either "
            'one, or use the \\"middle-out\\" transform to compress your prompt automatically.","code":400,'
            '"metadata":{"provider_name":"Chutes"}}}'
        ),
        WindowRefusal(window=131_072, prompt_tokens=10_535),
    ),
    "openrouter-text-and-tools": Refusal(
        400,
        (
            '{"error":{"message":"This endpoint\'s maximum context length is 204800 tokens. However, you requested '
            "about 205432 tokens (81684 of text input, 3748 of tool input, 120000 in the output). Please reduce the "
            'length of either one, or use the \\"middle-out\\" transform to compress your prompt automatically.",'
            '"code":400,"metadata":{"provider_name":null}},"user_id":"user_2uqLSwEPUxV3eobBtagk2bR7nQw"}'
        ),
        WindowRefusal(window=204_800, prompt_tokens=81_684 + 3748),
    ),
    "openrouter-input-only": Refusal(
        400,
        (
            '{"error":{"message":"This endpoint\'s maximum context length is 32768 tokens. However, you requested '
            "about 42832 tokens (42832 of text input). Please reduce the length of either one, or use the "
            '\\"middle-out\\" transform to compress your prompt automatically.","code":400,'
            '"metadata":{"provider_name":null}}}'
        ),
        WindowRefusal(window=32_768, prompt_tokens=42_832),
    ),
    # Amazon Bedrock's refusal relayed: the digest says only "Provider returned error".
    "openrouter-relays-bedrock": Refusal(
        400,
        (
            r'{"error":{"message":"Provider returned error","code":400,"metadata":{"raw":"{\"message\":\"input '
            r"length and `max_tokens` exceed context limit: 149674 + 64000 > 204658, decrease input length or "
            r'`max_tokens` and try again\"}","provider_name":"Amazon Bedrock"}},'
            r'"user_id":"user_2uqLSwEPUxV3eobBtagk2bR7nQw"}'
        ),
        WindowRefusal(window=204_658, prompt_tokens=149_674),
        relayed=True,
    ),
    # --- LM Studio -----------------------------------------------------------------------------------
    # What it must keep is not the prompt's size, so only the window is read.
    "lmstudio-keep-first": Refusal(
        400,
        (
            '{"error":"Trying to keep the first 15857 tokens when context the overflows. However, the model is '
            "loaded with context length of only 4096 tokens, which is not enough. Try to load the model with a "
            'larger context length, or provide a shorter input"}'
        ),
        WindowRefusal(window=4096),
    ),
    "lmstudio-n-keep": Refusal(
        400,
        (
            '{"error":"The number of tokens to keep from the initial prompt is greater than the context length '
            "(n_keep: 13055>= n_ctx: 4096). Try to load the model with a larger context length, or provide a "
            'shorter input."}'
        ),
        WindowRefusal(window=4096),
    ),
    # --- Gemini: an input cap, not a whole window ---------------------------------------------------
    "gemini": Refusal(
        400,
        (
            '{"error":{"code":400,"message":"The input token count (1200293) exceeds the maximum number of tokens '
            'allowed (1048576).","status":"INVALID_ARGUMENT"}}'
        ),
        WindowRefusal(prompt_tokens=1_200_293, input_limit=1_048_576),
    ),
}

#: Wordings on record only as sentences (logs and bug reports), with the numbers each names.
SENTENCES = {
    # vLLM, a multimodal prompt over --max-model-len.
    "vllm-multimodal": (
        "The prompt (total length 25938) is too long to fit into the model (context length 4096). "
        "Make sure that `max_model_len` is no smaller than the number of text tokens plus "
        "multimodal tokens.",
        WindowRefusal(window=4096, prompt_tokens=25_938),
    ),
    "vllm-decoder-prompt": (
        "The decoder prompt (length 12324) is longer than the maximum model length of 8192.",
        WindowRefusal(window=8192, prompt_tokens=12_324),
    ),
    # LM Studio: its llama.cpp engine before it named the context length, a chat that outgrew the window, and
    # its MLX engine (no number).
    "lmstudio-cannot-truncate": (
        "Cannot truncate prompt with n_keep (15028) >= n_ctx (7424)",
        WindowRefusal(window=7424),
    ),
    "lmstudio-mid-generation": (
        "Reached context length of 4096 tokens with model (arch: qwen3vlmoe) that does not "
        "currently support mid-generation context overflow. Try reloading with a larger "
        "context length or shortening the prompt/chat.",
        WindowRefusal(window=4096),
    ),
    "lmstudio-mlx": ("Context size has been exceeded", _NONE),
    # Ollama's MLX runner (the format string of x/mlxrunner/pipeline.go, numbers filled in).
    "ollama-mlx": (
        "input length (40000 tokens) exceeds the model's maximum context length (32768 tokens)",
        WindowRefusal(window=32_768, prompt_tokens=40_000),
    ),
    # SGLang.
    "sglang": (
        "Input length (160062 tokens) exceeds the maximum allowed length (59862 tokens).",
        WindowRefusal(prompt_tokens=160_062, input_limit=59_862),
    ),
    # Thousands separators, as a troubleshooting guide quotes OpenAI's input cap.
    "separators": (
        "Input tokens exceed the configured limit of 272,000 tokens. Your messages resulted in 1,084,698 tokens.",
        WindowRefusal(prompt_tokens=1_084_698, input_limit=272_000),
    ),
    # Lines wrapped inside the message (as a terminal client printed Anthropic's).
    "wrapped": (
        "input length and `max_tokens` exceed context limit: 184915 +\n20000 > 204648, decrease input "
        "length or `max_tokens` and try again",
        WindowRefusal(window=204_648, prompt_tokens=184_915),
    ),
}

#: Ordinary refusals that are not about the window: never ContextTooLong, and no number read from them.
NOT_CONTEXT = {
    # OpenAI: an output cap; shrinking the conversation would not help.
    "openai-max-tokens-output-cap": (
        400,
        (
            '{"error":{"message":"max_tokens is too large: 8192. This model supports at most 4096 completion tokens, '
            'whereas you provided 8192.","type":"invalid_request_error","param":"max_tokens","code":null}}'
        ),
        ProviderRejected,
    ),
    # Anthropic: the same, in its words.
    "anthropic-max-tokens-output-cap": (
        400,
        (
            '{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 10000 > 4096, which is '
            'the maximum allowed number of output tokens for claude-3-5-sonnet-20240620"}}'
        ),
        ProviderRejected,
    ),
    "anthropic-roles": (
        400,
        (
            '{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate '
            'between \\"user\\" and \\"assistant\\", but found multiple \\"user\\" roles in a row"}}'
        ),
        ProviderRejected,
    ),
    "openai-bad-parameter": (
        400,
        (
            '{"error":{"message":"Unrecognized request argument supplied: foo","type":"invalid_request_error",'
            '"param":null,"code":null}}'
        ),
        ProviderRejected,
    ),
    "openai-unknown-model": (
        404,
        (
            '{"error":{"message":"The model `gpt-9` does not exist or you do not have access to it.",'
            '"type":"invalid_request_error","param":null,"code":"model_not_found"}}'
        ),
        ProviderRejected,
    ),
    "azure-content-filter": (
        400,
        (
            '{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI\'s content '
            "management policy. Please modify your prompt and retry. To learn more about our content filtering "
            'policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766","type":null,'
            '"param":"prompt","code":"content_filter","status":400}}'
        ),
        ProviderRejected,
    ),
    "ollama-unknown-model": (404, '{"error":"model \\"llama9\\" not found, try pulling it first"}', ProviderRejected),
    # A per-minute token budget, not the window: its "Limit" is no window.
    "openai-tokens-per-minute": (
        429,
        (
            '{"error":{"message":"Request too large for gpt-4 in organization org-abc on tokens per min (TPM): '
            'Limit 10000, Requested 12000. The input or output tokens must be reduced in order to run successfully.",'
            '"type":"tokens","param":null,"code":"rate_limit_exceeded"}}'
        ),
        RateLimited,
    ),
    # A server fault that mentions no window stays retryable.
    "llama.cpp-other-500": (
        500,
        '{"error":{"code":500,"message":"Failed to parse tool call","type":"server_error"}}',
        ProviderUnavailable,
    ),
}


def _response(status: int, body: str) -> httpx.Response:
    request = httpx.Request("POST", _URL)
    return httpx.Response(status, content=body.encode(), headers={"content-type": "application/json"}, request=request)


def _message(body: str) -> str:
    """The error's message as a client that parsed the body would pass it on."""
    data = json.loads(body)
    error = data.get("error", data)
    return error if isinstance(error, str) else str(error.get("message") or "")


def _numbers(error: ContextTooLong) -> WindowRefusal:
    return WindowRefusal(window=error.window, prompt_tokens=error.prompt_tokens, input_limit=error.input_limit)


@pytest.mark.parametrize("case", CORPUS.values(), ids=CORPUS.keys())
def test_the_raw_body_names_the_window(case: Refusal) -> None:
    assert read_window_refusal(case.body) == case.expected


@pytest.mark.parametrize("case", CORPUS.values(), ids=CORPUS.keys())
def test_an_http_refusal_becomes_context_too_long_with_its_numbers(case: Refusal) -> None:
    error = error_for_status(_response(case.status, case.body))
    assert isinstance(error, ContextTooLong)
    assert _numbers(error) == case.expected
    assert error.status == case.status


@pytest.mark.parametrize("case", CORPUS.values(), ids=CORPUS.keys())
def test_the_message_alone_names_what_it_says(case: Refusal) -> None:
    """A mid-stream error brings its message and no status: the numbers in the sentence still travel."""
    error = classify_failure("refused", status=None, detail=_message(case.body))
    if case.relayed:
        assert not isinstance(error, ContextTooLong)
        return
    assert isinstance(error, ContextTooLong)
    assert _numbers(error) == (case.from_message if case.from_message is not None else case.expected)


@pytest.mark.parametrize(("text", "expected"), SENTENCES.values(), ids=SENTENCES.keys())
def test_each_wording_names_its_numbers(text: str, expected: WindowRefusal) -> None:
    assert read_window_refusal(text) == expected
    error = classify_failure("refused", status=400, detail=text)
    assert isinstance(error, ContextTooLong)
    assert _numbers(error) == expected


@pytest.mark.parametrize(("status", "body", "kind"), NOT_CONTEXT.values(), ids=NOT_CONTEXT.keys())
def test_other_refusals_are_not_about_the_window(status: int, body: str, kind: type) -> None:
    error = error_for_status(_response(status, body))
    assert type(error) is kind
    assert read_window_refusal(body) == _NONE


def test_a_stream_error_with_the_context_code_is_context_too_long() -> None:
    """The Responses API reports the refusal mid-stream, with its code as the only sign."""
    error = classify_failure(
        "failed mid-stream",
        status=None,
        kind="context_length_exceeded",
        detail="Your input exceeds the context window of this model. Please adjust your input and try again.",
    )
    assert isinstance(error, ContextTooLong)
    assert _numbers(error) == _NONE


def test_a_streamed_llama_cpp_type_alone_is_context_too_long() -> None:
    error = classify_failure(
        "stream error",
        status=None,
        kind="exceed_context_size_error",
        detail="the request exceeds the available context size, try increasing it",
    )
    assert isinstance(error, ContextTooLong)


def test_an_anthropic_stream_error_carries_its_numbers() -> None:
    error = anthropic.stream_error(
        {"type": "invalid_request_error", "message": "prompt is too long: 219898 tokens > 200000 maximum"}
    )
    assert isinstance(error, ContextTooLong)
    assert (error.window, error.prompt_tokens) == (200_000, 219_898)


def test_an_openrouter_stream_error_carries_its_numbers() -> None:
    """OpenRouter sends a refusal inside the stream with its status in ``code``."""
    error = openai_chat.stream_error(json.loads(CORPUS["openrouter-input-only"].body)["error"])
    assert isinstance(error, ContextTooLong)
    assert (error.window, error.prompt_tokens) == (32_768, 42_832)


def test_a_codex_turn_over_the_window_is_context_too_long() -> None:
    turn = {
        "status": "failed",
        "error": {
            "message": "Codex ran out of room in the model's context window. Start a "
            "new thread or clear earlier history before retrying.",
            "codexErrorInfo": "ContextWindowExceeded",
        },
    }
    error = CodexAppServer._turn_failure(turn)
    assert isinstance(error, ContextTooLong)
    assert _numbers(error) == _NONE


def test_the_whole_body_fills_what_the_digest_drops() -> None:
    """``error_for_status`` digests llama.cpp's error to type, code and message; its fields come from the body."""
    body = CORPUS["llama.cpp-2025-fields-only"].body
    digest = "exceed_context_size_error 400 the request exceeds the available context size."
    bare = classify_failure("x", status=400, detail=digest)
    assert isinstance(bare, ContextTooLong)
    assert (bare.window, bare.prompt_tokens) == (None, None)
    error = classify_failure("x", status=400, detail=digest, body=body)
    assert isinstance(error, ContextTooLong)
    assert (error.window, error.prompt_tokens) == (8192, 14_429)


def test_a_500_that_names_no_window_stays_retryable() -> None:
    error = classify_failure("x", status=500, detail="the context length of the request could not be measured")
    assert isinstance(error, ProviderUnavailable)


def test_context_too_long_defaults_to_no_numbers() -> None:
    error = ContextTooLong("too long")
    assert (error.window, error.prompt_tokens, error.input_limit) == (None, None, None)


def test_digits_near_the_word_context_are_not_a_window() -> None:
    assert read_window_refusal("context 128000 tokens, limit 4096, code 400") == _NONE
