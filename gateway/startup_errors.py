"""One line for each way foldgate fails to start: the setting to look at, what happened, what to do.

The person who meets these is setting foldgate up. A 60-line traceback ends in the one sentence
that helps them, when one does at all; so the start-up path raises :class:`StartupError` (the
platform adapters' errors are subclasses) and :func:`explain` turns it, or a Redis or provider
failure, into ``<setting>: <what happened> — <what to do>``. ``foldgate run``, ``foldgate doctor``
and the commands that open Redis share it, so one failure reads the same everywhere. What it does
not recognise is a bug, and keeps its traceback.
"""

from __future__ import annotations

import os
import socket
import ssl
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from redis.exceptions import AuthenticationError, AuthorizationError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

if TYPE_CHECKING:
    from gateway.config import Settings

#: Seconds a configured Redis gets to answer at start before it counts as unreachable.
REDIS_CONNECT_SECONDS = 15.0


class StartupError(RuntimeError):
    """A failure phrased for the operator: ``setting`` is the dotted key to look at, the message says
    what happened and, after " — ", what to do."""

    def __init__(self, message: str, *, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


def _causes(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def one_line(text: object, limit: int = 300) -> str:
    """The first line of ``text``, shortened: what a library said, quoted inside our own sentence."""
    first = (str(text).strip().splitlines() or [""])[0].strip()
    return first if len(first) <= limit else first[: limit - 1] + "…"


def setting_label(key: str, environ: Mapping[str, str] | None = None, *, provider: str | None = None) -> str:
    """``key``, naming the variable that set it when the value came from the environment.

    The operator edits where the value lives: a token from ``TELEGRAM_BOT_TOKEN`` is not fixed by
    editing config.yaml. The precedence is gateway.config's: ``FOLDGATE_...`` (the key or a section
    above it), then the conventional variable, then the file.
    """
    from gateway.config import CONVENTIONAL_ENV, ENV_NESTING, ENV_PREFIX, PROVIDER_KEY_ENV

    environ = os.environ if environ is None else environ
    upper = {name.upper(): name for name in environ}
    parts = key.split(".")
    for depth in range(len(parts), 0, -1):
        wanted = ENV_PREFIX + ENV_NESTING.join(parts[:depth]).upper()
        if wanted in upper and environ[upper[wanted]] != "":
            return f"{key} (from {upper[wanted]})"
    conventional = next((name for name, path in CONVENTIONAL_ENV.items() if ".".join(path) == key), None)
    if key == "model.api_key" and provider in PROVIDER_KEY_ENV:
        conventional = PROVIDER_KEY_ENV[provider]
    if conventional and environ.get(conventional):
        return f"{key} (from {conventional})"
    return key


def redis_address(url: str) -> str:
    """host:port (or the socket path) of a Redis URL, never its password."""
    parts = urlsplit(url.strip())
    if parts.scheme == "unix":
        return parts.path or url
    host = parts.hostname or "?"
    return f"{host}:{parts.port or 6379}"


def redis_failure(error: BaseException, settings: Settings, *, timeout: float = REDIS_CONNECT_SECONDS) -> StartupError:
    """The one-line error for a failure to reach the Redis ``settings`` name (or to start the embedded one);
    ``timeout`` is the deadline the caller gave it."""
    url = settings.redis.url.strip()
    if not url:
        return _embedded_failure(error)
    where = redis_address(url)
    chain = _causes(error)
    if any(isinstance(cause, (RedisTimeoutError, TimeoutError)) for cause in chain):
        return StartupError(
            f"no answer from {where} within {timeout:g} s — check the host and port "
            "in redis.url and that a firewall lets this machine reach it",
            setting="redis.url",
        )
    if _login_refused(error, chain):
        return StartupError(
            f"Redis at {where} refused the login ({one_line(error)}) — put the right user and password in "
            "redis.url (redis://USER:PASSWORD@host:port/0)",
            setting="redis.url",
        )
    for cause in chain:
        if (failure := _connection_failure(cause, where)) is not None:
            return failure
    return StartupError(
        f"cannot use Redis at {where} ({type(error).__name__}: {one_line(error)}) — check redis.url",
        setting="redis.url",
    )


def _embedded_failure(error: BaseException) -> StartupError:
    """Why the embedded server (no ``redis.url``) is of no use: another process holds it, it did not start, or
    it did not answer."""
    from gateway.server.lifecycle import EmbeddedRedisError, EmbeddedRedisInUse

    if isinstance(error, EmbeddedRedisInUse):
        return StartupError(one_line(error), setting="gateway.home")
    if isinstance(error, EmbeddedRedisError):
        return StartupError(
            f"the embedded Redis server did not start ({one_line(error)}) — read that log, "
            "or set redis.url to a Redis server you run",
            setting="gateway.home",
        )
    return StartupError(
        f"the embedded Redis server did not answer ({type(error).__name__}: {one_line(error)})"
        " — set redis.url to a Redis server you run",
        setting="gateway.home",
    )


def _login_refused(error: BaseException, chain: list[BaseException]) -> bool:
    """Whether Redis refused the user or password: the client's own error for it, or a server's reply that says
    so (``NOAUTH``, ``WRONGPASS``, ``NOPERM``, ``ERR AUTH …``) where the client did not recognise it."""
    if any(isinstance(cause, (AuthenticationError, AuthorizationError)) for cause in chain):
        return True
    said = str(error)
    return isinstance(error, ResponseError) and (
        said.split(" ", 1)[0] in ("NOAUTH", "WRONGPASS", "NOPERM") or said.startswith("ERR AUTH")
    )


def _connection_failure(cause: BaseException, where: str) -> StartupError | None:
    """The error for a cause the connection itself failed on (a name, a refusal, a missing socket, TLS); None
    for any other."""
    if isinstance(cause, socket.gaierror):
        return StartupError(
            f"cannot resolve the host of {where} ({cause.strerror or cause}) — check the host name in redis.url",
            setting="redis.url",
        )
    if isinstance(cause, ConnectionRefusedError):
        return StartupError(
            f"nothing accepts connections at {where} (connection refused) — start Redis there, "
            "or correct the host and port in redis.url (empty = the embedded server)",
            setting="redis.url",
        )
    if isinstance(cause, FileNotFoundError):
        return StartupError(
            f"no Redis socket at {where} — start Redis there, or correct redis.url", setting="redis.url"
        )
    if isinstance(cause, ssl.SSLError):
        return StartupError(
            f"the TLS handshake with {where} failed ({one_line(cause)}) — rediss:// needs a "
            "server that speaks TLS; check redis.url",
            setting="redis.url",
        )
    return None


def provider_setting(error: BaseException, config_key: str = "model") -> str:
    """The key a provider failure points at: the key for a refused key, the name for an unknown model,
    otherwise the address."""
    status = getattr(error, "status", None)
    if status in (401, 403):
        return f"{config_key}.api_key"
    if status == 404:
        return f"{config_key}.name"
    return f"{config_key}.base_url"


def explain(
    error: BaseException, settings: Settings | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """``<setting>: <what happened> — <what to do>`` for a failure foldgate knows, else None."""
    from agent.llm.errors import ProviderError

    provider = settings.model.provider if settings is not None else None
    if isinstance(error, RedisError) and settings is not None:
        error = redis_failure(error, settings)
    if isinstance(error, StartupError):
        return f"{setting_label(error.setting, environ, provider=provider)}: {one_line(error, 1000)}"
    if isinstance(error, ProviderError):
        setting = provider_setting(error)
        text = one_line(error, 1000)
        if "check " not in text:  # a refused or dropped connection: the message says what, not what to do
            text += f" — check {setting} and that the server there is up"
        return f"{setting_label(setting, environ, provider=provider)}: the model call failed: {text}"
    return None


def exit_code_of(command: str, settings: Settings, work: Callable[[], int]) -> int:
    """Run a command's ``work``: a failure :func:`explain` knows becomes one line on stderr and exit
    code 1; anything else keeps its traceback, since it is a bug."""
    try:
        return work()
    except KeyboardInterrupt:  # Ctrl-C before a command's own signal handling is in place
        return 130
    except Exception as error:
        line = explain(error, settings)
        if line is None:
            raise
        print(f"{command}: {line}", file=sys.stderr)
        return 1
