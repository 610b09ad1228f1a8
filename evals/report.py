"""Where every benchmark's results go: ``<name>.json`` and ``<name>.md`` in the out directory, and the table on
stdout."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gateway.progress import Progress

#: How to install matplotlib (the ``evals`` extra in pyproject.toml), for the line printed when a plot is skipped.
PLOT_EXTRA_HINT = "pip install 'foldgate[evals]'"


def publish(out_dir: str | Path, name: str, data: Any, markdown: str) -> Path:
    """Write the results as JSON and Markdown side by side, print the Markdown; returns the directory."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    text = markdown if markdown.endswith("\n") else markdown + "\n"
    (out / f"{name}.md").write_text(text, encoding="utf-8")
    print(text, end="")
    print(f"json: {out / f'{name}.json'}")
    return out


def progress(total: int, unit: str, label: str) -> Progress:
    """A benchmark's progress on stderr: stdout carries its table, so the two can be redirected apart."""
    return Progress(total, unit, sys.stderr, label=label)
