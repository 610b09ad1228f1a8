"""What keeps the pages safe: strict headers, no cross-site writes, and the operator's token.

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
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import hdrs, web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

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


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse cross-site writes; give every answer the security headers."""
    if is_state_changing(request) and not same_origin(request):
        response: web.StreamResponse = web.Response(status=403, text="cross-site request refused\n")
    else:
        try:
            response = await handler(request)
        except web.HTTPException as error:  # redirects and refusals get the headers too
            error.headers.update(HEADERS)
            raise
    if not response.prepared:  # a WebSocket already sent its headers
        response.headers.update(HEADERS)
    return response


class AdminToken:
    """The operator's token; None refuses every operator request."""

    def __init__(self, token: str | None) -> None:
        self._token = token.encode() if token else None

    @property
    def configured(self) -> bool:
        return self._token is not None

    def cookie_value(self) -> str:
        """What the login cookie holds: a keyed hash of the token (the token itself never sits in a browser)."""
        assert self._token is not None
        return hmac.new(self._token, b"foldgate operator view", hashlib.sha256).hexdigest()

    def matches(self, candidate: str) -> bool:
        return self._token is not None and hmac.compare_digest(candidate.encode(), self._token)

    def admits(self, request: web.Request) -> bool:
        """Whether the request carries the token (header) or the login cookie."""
        if self._token is None:
            return False
        scheme, _, value = request.headers.get(hdrs.AUTHORIZATION, "").partition(" ")
        if scheme.lower() == "bearer" and self.matches(value.strip()):
            return True
        cookie = request.cookies.get(ADMIN_COOKIE, "")
        return bool(cookie) and hmac.compare_digest(cookie.encode(), self.cookie_value().encode())

    def set_cookie(self, response: web.StreamResponse, request: web.Request) -> None:
        response.set_cookie(ADMIN_COOKIE, self.cookie_value(), httponly=True, samesite="Strict", path="/admin",
                            secure=request.secure)
