"""Sizes and durations as people read them ("3.1 MB", "0:12")."""

from __future__ import annotations

_UNITS = ((1024**3, "GB"), (1024**2, "MB"), (1024, "KB"))


def size_text(size: int) -> str:
    """``3250585`` -> ``"3.1 MB"``, ``20971520`` -> ``"20 MB"``, ``512`` -> ``"512 bytes"`` (1 KB = 1024 bytes)."""
    for unit, label in _UNITS:
        if size >= unit:
            value = size / unit
            shown = f"{value:.1f}".removesuffix(".0") if value < 100 else f"{value:.0f}"
            return f"{shown} {label}"
    return f"{size} bytes" if size != 1 else "1 byte"
