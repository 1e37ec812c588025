"""StatusBar: server state, endpoint, model, uptime, restarts — the line people glance at."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

STATE_STYLE = {
    "ready": "bold green", "starting": "bold yellow", "stopping": "bold yellow",
    "stopped": "dim", "failed": "bold red", "backoff": "bold magenta", "sleeping": "bold blue",
}


def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class StatusBar(Static):
    DEFAULT_CSS = """
    StatusBar { height: 1; padding: 0 1; background: $panel; }
    """

    last_text = ""

    def show(self, state: dict[str, Any], endpoint: str, model: str) -> None:
        name = state.get("state") or "stopped"
        text = Text()
        text.append(f"● {name.upper()}", STATE_STYLE.get(name, ""))
        text.append(f"  {model}  {endpoint}")
        if state.get("uptime_s") is not None and name in ("ready", "starting"):
            text.append(f"  up {_uptime(state['uptime_s'])}")
        if state.get("restarts"):
            text.append(f"  restarts {state['restarts']}", "magenta")
        if state.get("detail") and name != "ready":
            text.append(f"  — {state['detail']}", "dim")
        self.last_text = text.plain
        self.update(text)
