"""Where ``foldgate run`` logs: stderr, or a file beside the sessions when a terminal chat owns the screen.

One format for every process that logs like the gateway (worker processes in the tests too).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TextIO

from gateway.config import Settings
from gateway.progress import is_terminal

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_where(settings: Settings, stdin: TextIO) -> Path | None:
    """Set up logging: to stderr, except under an interactive terminal chat, where a log line would
    break into the conversation; there it goes to ``<home>/foldgate.log`` (returned)."""
    if not (settings.platforms.local.enabled and is_terminal(stdin)):
        logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
        return None
    path = settings.home_path / "foldgate.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT, filename=path, encoding="utf-8", force=True)
    return path
