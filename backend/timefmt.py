"""Durations in words, one rule for the whole console: "12 s", "5 min", "3 h 10 min", "2 d 4 h"."""

from __future__ import annotations


def duration(seconds: float | None) -> str:
    """How long something has been up, in words ("?" when unknown)."""
    if seconds is None:
        return "?"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def ago(seconds: float) -> str:
    """How long ago: "12 s ago", "3 h 10 min ago"."""
    return f"{duration(seconds)} ago"
