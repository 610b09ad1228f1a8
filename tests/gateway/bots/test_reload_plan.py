"""What a reload decides before it touches a bot: removed, changed and failed bots stop, new and changed ones
start, an untouched running bot is left alone, the bot holding the terminal or web chat is held, and the
process's own sections stay as they started."""

from __future__ import annotations

from typing import Any

from gateway.bots.fleet import BotStatus
from gateway.bots.reload_plan import outcome_lines, plan_reload
from gateway.config import Settings


def bot(name: str, prompt: str = "") -> dict[str, Any]:
    token = {"support": "111111:a", "ops": "222222:b", "newcomer": "444444:d"}[name]
    return {
        "name": name,
        "model": {"system_prompt": prompt},
        "platforms": {"telegram": {"enabled": True, "token": token}},
    }


def settings(*bots: dict[str, Any], prefix: str = "fg") -> Settings:
    return Settings(redis={"key_prefix": prefix}, platforms={"local": {"enabled": False}}, bots=list(bots))


def configured(current: Settings) -> dict[str, Any]:
    return {each.name: each for each in current.each_bot()}


def test_a_removed_bot_stops_a_new_one_starts_and_an_untouched_one_is_left_alone():
    current = settings(bot("support"), bot("ops"))
    plan = plan_reload(
        current, settings(bot("support"), bot("newcomer")), configured(current), {"support", "ops"}, "", False
    )
    assert (plan.stop, plan.start, plan.removed, plan.notes) == (["ops"], ["newcomer"], ["ops"], [])
    assert list(plan.wanted) == ["support", "newcomer"]
    assert not plan.restarts("newcomer")


def test_a_changed_bot_and_a_failed_one_are_restarted():
    current = settings(bot("support"), bot("ops"))
    new = settings(bot("support", "Be kind."), bot("ops"))
    changed = plan_reload(current, new, configured(current), {"support", "ops"}, "", False)
    failed = plan_reload(current, current, configured(current), {"support"}, "", False)  # ops failed at start
    assert (changed.stop, changed.start, changed.removed) == (["support"], ["support"], [])
    assert changed.restarts("support")
    assert (failed.stop, failed.start) == (["ops"], ["ops"])


def test_the_bot_holding_the_local_chat_is_neither_stopped_nor_started():
    current = settings(bot("support"), bot("ops"))
    plan = plan_reload(
        current, settings(bot("ops", "Be kind.")), configured(current), {"support", "ops"}, "support", True
    )
    assert plan.notes == ["bot support serves the terminal or web chat: restart foldgate to change or remove it"]
    assert (plan.stop, plan.start, list(plan.wanted)) == (["ops"], ["ops"], ["ops", "support"])


def test_a_process_section_changed_is_said_and_kept_as_it_started():
    current = settings(bot("support"))
    plan = plan_reload(current, settings(bot("support"), prefix="other"), configured(current), {"support"}, "", False)
    assert plan.notes == ["redis changed: restart foldgate to apply it (a reload changes bots only)"]
    assert plan.settings.redis.key_prefix == "fg"
    assert (plan.stop, plan.start) == ([], [])


def test_what_was_done_is_one_line_a_bot():
    current = settings(bot("support"), bot("ops"))
    plan = plan_reload(
        current,
        settings(bot("support", "Be kind."), bot("newcomer")),
        configured(current),
        {"support", "ops"},
        "",
        False,
    )
    statuses = {"newcomer": BotStatus("newcomer", "failed", "the token was refused")}
    assert outcome_lines(plan, {"support"}, statuses) == [
        "bot ops stopped",
        "bot support restarted",
        "bot newcomer could not start: the token was refused",
    ]
