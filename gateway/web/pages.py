"""The pages' templates and the filters they format numbers and times with.

One Jinja2 environment, autoescaping every value: a chat message, a chat key or a summary that
holds ``<script>`` is shown as text. Templates and static files ship inside the package; nothing
is fetched from anywhere else.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web

from gateway.web.charts import short_tokens

#: The pages' own CSS and JavaScript, served under ``/static/``.
STATIC_DIR = Path(__file__).with_name("static")


def _number(value: float | int | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def _money(value: float | None) -> str:
    if value is None:
        return "–"
    return f"${value:,.4f}" if 0 < abs(value) < 1 else f"${value:,.2f}"


def _when(ts: float | None) -> str:
    if not ts:
        return "–"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _percent(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.0f}%"


ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("gateway.web"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENVIRONMENT.filters.update(number=_number, money=_money, when=_when, percent=_percent, short_tokens=short_tokens)


def render(name: str, *, status: int = 200, **context: Any) -> web.Response:
    """The template ``name`` as an HTML response."""
    body = ENVIRONMENT.get_template(name).render(**context)
    return web.Response(text=body, status=status, content_type="text/html", charset="utf-8")


def add_static(app: web.Application) -> None:
    app.router.add_static("/static/", STATIC_DIR, name="static")
