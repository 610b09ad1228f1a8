"""Where things are in the checkout, named once so a test file can move between folders without
counting parent directories."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "tests" / "fixtures"
EVAL_DATA = REPO / "evals" / "fixtures" / "data"
