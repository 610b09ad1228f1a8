"""One row of ``foldgate doctor``'s report, and how long a check may wait for the service it reaches.

Kept apart from :mod:`gateway.cli.doctor` so the checks that live in their own modules
(:mod:`gateway.cli.doctor_extras`) build the same rows under the same deadlines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: Seconds each check may take; a check still waiting then fails and names what to look at.
#: (Telegram and Discord keep theirs in their adapters, shared with ``foldgate run``.)
REDIS_TIMEOUT = 5.0
PROVIDER_TIMEOUT = 10.0

Status = Literal["ok", "FAIL", "skipped"]


@dataclass(frozen=True)
class Check:
    """One row of the report: what was checked, how it went, and the detail or what to fix."""

    name: str
    status: Status
    detail: str
