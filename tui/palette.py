"""Rich styles from the theme's variables, so panels drawn with Rich tables follow the theme
(both themes in themes/ colour everything; no hard-coded colour names)."""

from __future__ import annotations

from typing import Any


def colour(app: Any, name: str) -> str:
    """The theme variable `name` as a Rich colour ('' when it is not a plain colour)."""
    try:
        value = str(app.theme_variables.get(name, ""))
    except Exception:  # no app yet (a widget rendered outside one)
        return ""
    return value[:7] if value.startswith("#") else ""


def style(app: Any, name: str, extra: str = "") -> str:
    """`extra` plus the theme colour `name`: style(app, "warning", "bold") -> "bold #e0af68"."""
    c = colour(app, name)
    return " ".join(p for p in (extra, c) if p) or "none"


# the theme variable for each server state
STATE_COLOUR = {"ready": "success", "starting": "warning", "stopping": "warning", "failed": "error",
                "backoff": "secondary", "stopped": "", "sleeping": "primary"}
