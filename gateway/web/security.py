"""What keeps the pages safe: strict headers, no cross-site writes, and the operator's token.

- A request must name this server in its ``Host``: an IP address, ``localhost``, or one of
  ``gateway.allowed_hosts``. Any other name is a page elsewhere whose DNS now points here (DNS
  rebinding), and is refused before anything else is looked at.
- Every response carries a Content-Security-Policy that allows only this origin's scripts and
  styles (no inline script can run, even if a value escaped the templates), and is never framed.
- A state-changing request (a chat message, ``/compress``, ``/new``, a login) and a WebSocket
  upgrade must come from a page of this same origin: the browser's ``Sec-Fetch-Site`` and
  ``Origin`` headers say where it came from, and a cross-site one is refused.
- The operator view asks for ``gateway.admin_token``, as ``Authorization: Bearer <token>`` or as the
  HttpOnly cookie its login form sets. The cookie holds a keyed hash of the token, not the token;
  both are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

from aiohttp import hdrs, web
from redis.exceptions import RedisError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
#: Methods that change nothing; every other one must come from this origin.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: The operator's cookie.
ADMIN_COOKIE = "fg_admin"
#: Paths a scraper or a probe reaches by whatever name it knows the server by.
PROBE_PATHS = frozenset({"/metrics", "/healthz"})


def names_this_server(host_header: str, allowed: Iterable[str]) -> bool:
    """Whether a ``Host`` header names this server: an IP address, ``localhost``, or an allowed name."""
    name = urlsplit("//" + host_header).hostname or ""
    if name == "localhost" or name in {host.lower() for host in allowed}:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def same_origin(request: web.Request) -> bool:
    """Whether the request came from a page of this origin, by the headers browsers send (a client
    that is no browser, such as curl, sends neither and is not a cross-site page either)."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None:
        return True
    return origin != "null" and urlsplit(origin).netloc == request.host


def is_state_changing(request: web.Request) -> bool:
    upgrade = request.headers.get(hdrs.UPGRADE, "").lower() == "websocket"
    return request.method not in SAFE_METHODS or upgrade


def guard(allowed_hosts: Iterable[str] = ()) -> Middleware:
    """The middleware every page goes through: refuse other hosts' names and cross-site writes, answer
    a Redis that does not answer with a 503, give every answer the security headers."""
    allowed = tuple(allowed_hosts)

    @web.middleware
    async def guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in PROBE_PATHS and not names_this_server(request.host, allowed):
            response: web.StreamResponse = web.Response(
                status=421,
                text="this server does not answer to that name (gateway.allowed_hosts lists the names it does)\n",
            )
        elif is_state_changing(request) and not same_origin(request):
            response = web.Response(status=403, text="cross-site request refused\n")
        else:
            try:
                response = await handler(request)
            except web.HTTPException as error:  # redirects and refusals get the headers too
                error.headers.update(HEADERS)
                raise
            except (RedisError, OSError):
                response = web.Response(status=503, text="Redis is not answering; try again in a moment\n")
        if not response.prepared:  # a WebSocket already sent its headers
            response.headers.update(HEADERS)
        return response

    return guarded


class AdminToken:
    """The operator's token; None refuses every operator request."""

    def __init__(self, token: str | None) -> None:
        self._token = token.encode() if token else b""
        #: What the login cookie holds: a keyed hash of the token (the token itself never sits in a browser).
        self._cookie = hmac.new(self._token, b"foldgate operator view", hashlib.sha256).hexdigest().encode()

    @property
    def configured(self) -> bool:
        return bool(self._token)

    def matches(self, candidate: str) -> bool:
        return self.configured and hmac.compare_digest(candidate.encode(), self._token)

    def admits(self, request: web.Request) -> bool:
        """Whether the request carries the token (header) or the login cookie."""
        if not self.configured:
            return False
        scheme, _, value = request.headers.get(hdrs.AUTHORIZATION, "").partition(" ")
        if scheme.lower() == "bearer" and self.matches(value.strip()):
            return True
        cookie = request.cookies.get(ADMIN_COOKIE, "")
        return bool(cookie) and hmac.compare_digest(cookie.encode(), self._cookie)

    def set_cookie(self, response: web.StreamResponse, request: web.Request) -> None:
        response.set_cookie(
            ADMIN_COOKIE, self._cookie.decode(), httponly=True, samesite="Strict", path="/admin", secure=request.secure
        )
