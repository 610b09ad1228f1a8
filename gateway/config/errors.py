"""The one exception a configuration problem raises, however many problems there are."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic_core import PydanticCustomError


class ConfigError(Exception):
    """Everything wrong with a configuration, reported together, so one run of ``config check`` shows it all."""

    def __init__(self, problems: Sequence[str], *, source: str | Path | None = None) -> None:
        self.problems = list(dict.fromkeys(problems))
        self.source = str(source) if source is not None else None
        super().__init__("\n".join(self.problems))

    def __str__(self) -> str:
        return "\n".join(self.problems)

    def one_line(self) -> str:
        """The first problem, and how many more: where one line must do (a refused reload)."""
        more = len(self.problems) - 1
        return self.problems[0] + (f" (and {more} more)" if more > 0 else "") if self.problems else "invalid"


class ConfigFileError(ConfigError):
    """The config file itself cannot be read (``foldgate config`` exits 2, not 1)."""


def require(missing: list[tuple[str, str]]) -> None:
    """Report every unmet cross-key requirement of one section at once.

    Each entry is (key relative to the section, reason); the formatter turns it into a problem
    naming the full dotted key, because a model validator cannot point at a key by itself.
    """
    if missing:
        raise PydanticCustomError(
            "config_requirement",
            "{summary}",
            {"summary": "; ".join(f"{key}: {reason}" for key, reason in missing), "problems": missing},
        )
