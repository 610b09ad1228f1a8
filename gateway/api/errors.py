"""Errors in the shape OpenAI's clients read: ``{"error": {"message", "type", "code", "param"}}``.

A client library turns the status into its own exception (401 ``AuthenticationError``, 400
``BadRequestError``, 429 ``RateLimitError``…) and shows ``message``; ``param`` names the request's field
at fault so the caller can fix it. Nothing else reaches the client: no traceback, no provider's text.
"""

from __future__ import annotations

from aiohttp import web

from agent import json_codec


class ApiError(Exception):
    """A request answered with an error: the status, and what the body says."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        #: Seconds the client should wait before asking again (429, 503), sent as ``Retry-After``.
        self.retry_after = retry_after

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.type, "code": self.code, "param": self.param}}

    def response(self, headers: dict[str, str] | None = None) -> web.Response:
        """The error as an HTTP response (with ``Retry-After`` when there is a wait to announce)."""
        sent = dict(headers or {})
        if self.retry_after is not None:
            sent["Retry-After"] = str(max(1, round(self.retry_after)))
        return web.Response(
            status=self.status, text=json_codec.dumps_text(self.body()), content_type="application/json", headers=sent
        )


def invalid(param: str, message: str) -> ApiError:
    """400 naming the request field at fault."""
    return ApiError(400, message, param=param, code="invalid_value")


def bad_key() -> ApiError:
    return ApiError(
        401, "Incorrect or missing API key: send it as `Authorization: Bearer <key>`.", code="invalid_api_key"
    )


def unknown_model(name: str, known: list[str]) -> ApiError:
    return ApiError(
        404,
        f"The model {name!r} does not exist here; GET /v1/models lists {', '.join(known)}.",
        code="model_not_found",
        param="model",
    )


def not_answered() -> ApiError:
    return ApiError(
        403,
        "This key's messages are not answered here (blocked, or not among the people allowed); it is kept.",
        code="permission_denied",
    )


def too_large(limit: int) -> ApiError:
    return ApiError(413, f"The request body is larger than {limit} bytes.", code="request_too_large")


def too_fast(retry_after: float) -> ApiError:
    return ApiError(
        429,
        "You are sending requests faster than this key may be answered; the message is kept in the session.",
        type="requests",
        code="rate_limit_exceeded",
        retry_after=retry_after,
    )


def provider_away(retry_after: float) -> ApiError:
    return ApiError(
        503,
        "The model provider does not answer now; the message is kept in the session and will be answered when"
        " it is back (do not send it again).",
        type="server_error",
        code="provider_unavailable",
        retry_after=retry_after,
    )


def not_stored(retry_after: float) -> ApiError:
    return ApiError(
        503,
        "The message could not be stored now; send it again in a moment.",
        type="server_error",
        code="store_unavailable",
        retry_after=retry_after,
    )


def internal() -> ApiError:
    return ApiError(500, "The gateway failed to answer this request.", type="server_error", code="internal_error")
