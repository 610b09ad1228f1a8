"""The bundled overnight conversation: what ``foldgate run`` shows on a machine with no bot tokens.

A team chat piles up a few hundred messages overnight while the bot is only listening;
in the morning someone asks the bot about a detail from the night. That is the case the
gateway's 85% hygiene exists for: the backlog alone is near the model's window, so hygiene
compacts before the turn, and the answer has to come back out of the archive.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gateway.platforms.base import IncomingMessage

PEOPLE = ("aiko", "bruno", "chen", "dara", "emeka", "farah")
SERVICES = ("billing-api", "auth-gateway", "search-indexer", "notifier", "ledger", "media-resizer")
TOPICS = (
    "the p99 latency on {service} went from {a}ms to {b}ms after the {hour}:00 deploy",
    "{service} is logging 'connection reset by peer' about {n} times a minute from the {zone} pool",
    "I bumped the {service} worker count from {a} to {b}, queue depth is back under {n}",
    "dashboards for {service} look flat since {hour}:{minute:02d}, could be the exporter again",
    "the canary for {service} in {zone} is green, promoting to {pct}% of traffic",
    "rolled the config for {service} back to revision {n}, the flag default was inverted",
    "memory on {service} pods creeps up about {a}MB an hour, might be the new cache",
    "the {zone} load balancer drained {n} connections cleanly during the restart",
    "disk on the {service} primary is at {pct}%, compaction should bring it down by morning",
    "retry storm from {service} is over, the circuit breaker opened at {hour}:{minute:02d}",
)
ZONES = ("eu-west", "us-east", "ap-south", "eu-north")

#: The facts the morning question and the demo's follow-ups ask about (question, literal answer).
FACTS = (
    ("Which commit fixed the login timeout?", "9f3c2ab71d"),
    ("What error did the auth-gateway throw?", "AuthTimeoutError: upstream token check exceeded 4000ms"),
    ("Which PR holds the login timeout fix?", "#4821"),
)


@dataclass(frozen=True)
class DemoScript:
    backlog: list[IncomingMessage]
    question: IncomingMessage


def _chatter(rng: random.Random) -> str:
    """One to three status lines, the way people post during an incident night."""
    return ". ".join(_line(rng) for _ in range(rng.randint(1, 3)))


def _line(rng: random.Random) -> str:
    template = rng.choice(TOPICS)
    return template.format(
        service=rng.choice(SERVICES),
        zone=rng.choice(ZONES),
        a=rng.randint(20, 900),
        b=rng.randint(20, 900),
        n=rng.randint(2, 9000),
        hour=rng.randint(0, 23),
        minute=rng.randint(0, 59),
        pct=rng.choice((5, 10, 25, 50, 85)),
    )


def overnight(
    chat_id: str = "terminal", *, messages: int = 640, seed: int = 11, start_ts: float = 1_764_460_800.0
) -> DemoScript:
    """A seeded overnight backlog with the planted facts in the middle of the night."""
    rng = random.Random(seed)
    planted = {
        messages // 5: (
            "dara",
            "auth-gateway started throwing AuthTimeoutError: upstream token check exceeded 4000ms for EU logins",
        ),
        messages // 3: (
            "emeka",
            "found the login timeout: the token cache TTL was 0 after the config migration. "
            "The fix is commit 9f3c2ab71d, PR #4821",
        ),
        messages // 2: (
            "aiko",
            "decision: we fix forward with #4821 instead of rolling back, "
            "the rollback would drop the new billing columns",
        ),
    }
    backlog = []
    for index in range(messages):
        who, text = planted.get(index, (rng.choice(PEOPLE), _chatter(rng)))
        backlog.append(
            IncomingMessage(
                platform="local",
                chat_id=chat_id,
                user_id=who,
                user_name=who,
                update_id=f"night-{seed}-{index}",
                text=f"{who}: {text}",
                ts=start_ts + index * 60,
                respond=False,
            )
        )
    question = IncomingMessage(
        platform="local",
        chat_id=chat_id,
        user_id="you",
        user_name="you",
        update_id=f"morning-{seed}",
        text="Good morning! Which commit fixed the login timeout overnight?",
        ts=start_ts + messages * 60 + 3600,
    )
    return DemoScript(backlog, question)
