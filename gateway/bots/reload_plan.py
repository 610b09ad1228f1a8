"""What a reload changes, decided before anything is touched.

:meth:`gateway.bots.fleet.Fleet.reload` first asks :func:`plan_reload` which bots to add, remove and restart
(a running bot whose settings did not change is left alone), then applies that plan. Keeping the decision
apart from stopping and starting means it can be read (and reasoned about) as a plain comparison of two
configurations, without the awaits and the bookkeeping of the fleet in between.

No bot is reconfigured in place: a bot's parts (agents, send budget, platforms) are built from its settings
once, so a changed bot is stopped and started again on the new settings.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway.config import Settings
from gateway.config.bots import Bot

#: Sections of the file that are the process's, not a bot's: a reload cannot change them.
PROCESS_SECTIONS = ("redis", "gateway", "delivery", "media")


class Status(Protocol):
    """What the outcome reads of a bot's status (the fleet's ``BotStatus``): the line saying why it could not start."""

    @property
    def detail(self) -> str: ...


@dataclass(frozen=True)
class ReloadPlan:
    """A reload decided: the settings the fleet goes on with, and which bots stop and which start.

    ``stop`` is in the old configuration's order and ``start`` in the new one's; a bot in both is restarted
    (changed, or failed and tried again), one only stopped is removed, one only started is added."""

    #: The new settings, with the process's own sections as they started.
    settings: Settings
    #: The bots the fleet ends with, in the new configuration's order (a held front bot kept, last if removed).
    wanted: dict[str, Bot]
    stop: list[str]
    start: list[str]
    #: Lines to say about what the reload will not do (process sections changed, the front bot held).
    notes: list[str]

    @property
    def removed(self) -> list[str]:
        """Bots stopped for good: gone from the configuration."""
        return [name for name in self.stop if name not in self.wanted]

    def restarts(self, name: str) -> bool:
        """Whether starting ``name`` starts it again (it was stopped first) rather than for the first time."""
        return name in self.stop


def plan_reload(
    current: Settings,
    new: Settings,
    configured: Mapping[str, Bot],
    running: Collection[str],
    front: str,
    holds_front: bool,
) -> ReloadPlan:
    """Compare the fleet's ``configured`` bots (those ``running`` among them) with ``new``.

    A bot is stopped when it is gone, changed, or not running (a failed bot is tried again); it is started
    when it is new or was stopped and is still wanted. ``holds_front`` says the ``front`` bot serves the
    terminal or web chat, whose page holds its parts: then it is neither stopped nor started, only a restart
    of the process can change or remove it."""
    notes = process_sections_changed(current, new)
    kept = {section: getattr(current, section) for section in PROCESS_SECTIONS}
    settings = new.model_copy(update=kept)
    wanted = {bot.name: bot for bot in settings.each_bot()}
    stop = [name for name, bot in configured.items() if _must_stop(name, bot, wanted, running)]
    held = configured.get(front)
    if held is not None and front in stop and holds_front:
        notes.append(f"bot {front} serves the terminal or web chat: restart foldgate to change or remove it")
        stop.remove(front)
        wanted[front] = held
    start = [name for name in wanted if name not in configured or name in stop]
    return ReloadPlan(settings, wanted, stop, start, notes)


def process_sections_changed(current: Settings, new: Settings) -> list[str]:
    """A line for each process section ``new`` changes: those take a restart of the process."""
    return [
        f"{section} changed: restart foldgate to apply it (a reload changes bots only)"
        for section in PROCESS_SECTIONS
        if getattr(new, section) != getattr(current, section)
    ]


def _must_stop(name: str, bot: Bot, wanted: Mapping[str, Bot], running: Collection[str]) -> bool:
    """Whether a configured bot stops: gone from ``wanted``, its settings changed, or not running now."""
    return name not in wanted or wanted[name].settings != bot.settings or name not in running


def outcome_lines(plan: ReloadPlan, running: Collection[str], statuses: Mapping[str, Status]) -> list[str]:
    """What the applied ``plan`` did, one line per bot: stopped, started or restarted, or could not start."""
    lines = [f"bot {name} stopped" for name in plan.removed]
    lines += [
        f"bot {name} {'restarted' if plan.restarts(name) else 'started'}" for name in plan.start if name in running
    ]
    lines += [
        f"bot {name} could not start: {statuses[name].detail}"
        for name in plan.start
        if name not in running and name in statuses
    ]
    return lines
