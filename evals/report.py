"""Where every benchmark's results go: ``<name>.json`` and ``<name>.md`` in the out directory, and the table on stdout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


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
