"""StatusBar: server state, endpoint, model, uptime, restarts — the line people glance at — and
what is under way: a start's phase, elapsed and expected time, a stop's countdown to SIGKILL, a
restart waiting for the old server to exit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual.widgets import Static

from backend.server.status import ServerState, ServerStatus
from tui.palette import STATE_COLOUR, style


def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def progress_text(state: ServerStatus | Mapping[str, Any], parsed: dict[str, Any]) -> str:
    """While starting: phase · elapsed / expected (the last start of the same settings);
    while stopping: the countdown to SIGKILL. (A status dict is read with ServerStatus.from_dict.)"""
    state = ServerStatus.from_dict(state)
    if state.state is ServerState.STARTING:
        up = state.uptime_s
        out = f"phase {parsed.get('phase') or 'starting'}"
        if up is not None:
            out += f" · {_uptime(up)}"
            expected = state.expected_ready_s
            out += f" of ~{_uptime(expected)} (last start)" if expected else " (first start of these settings)"
        return out
    if state.state is ServerState.STOPPING:
        left = state.sigkill_in_s
        return "SIGTERM sent" + (f" · SIGKILL in {left:.0f} s" if left is not None else "")
    return ""


def event_text(last_event: str, detail: str) -> str:
    """The journal's newest line without the outcome the state's detail has just said ("stopped in
    0.6 s · stopped by root 1 min ago: stopped in 0.6 s" read twice at 80 columns)."""
    if detail and last_event.endswith(f": {detail}"):
        return last_event[: -len(detail) - 2]
    return last_event


class StatusBar(Static):
    DEFAULT_CSS = """
    StatusBar { height: auto; max-height: 2; padding: 0 1; background: $panel; }
    """

    last_text = ""
    _shown: Text | None = None

    def show(self, state: ServerStatus | Mapping[str, Any], endpoint: str, model: str,
             parsed: dict[str, Any] | None = None, pending: str = "", profile: str | None = None,
             last_event: str = "") -> None:
        state = ServerStatus.from_dict(state)
        name = state.state
        text = Text()
        colour = STATE_COLOUR.get(name, "")
        text.append(f"● {name.upper()}", style(self.app, colour, "bold") if colour else "dim")
        progress = progress_text(state, parsed or {})
        if progress:
            text.append(f"  {progress}", style(self.app, colour))
        if pending:
            text.append(f"  {pending}", style(self.app, "accent", "bold"))
        stall = state.extra.get("stall")  # a start phase far past its usual length (backend/server/watchdog.py)
        if stall:
            text.append(f"  {stall['text']}: k dumps the stacks", style(self.app, "warning", "bold"))
        text.append(f"  {model}  {endpoint}")
        if profile:
            text.append(f"  profile {profile}", style(self.app, "accent"))
        if state.uptime_s is not None and name is ServerState.READY:
            text.append(f"  up {_uptime(state.uptime_s)}")
        if state.restarts:
            text.append(f"  restarts {state.restarts}", style(self.app, "secondary"))
        detail = state.detail if state.detail and name not in (ServerState.READY, ServerState.STOPPING) else ""
        if detail:
            text.append(f"  — {detail}", "dim")
        if last_event:  # the journal's newest line (backend/events.py): who did what, when
            text.append(f"  · {event_text(last_event, detail)}", "dim")
        if text == self._shown:  # nothing changed: no redraw (the poll runs 5 times a second)
            return
        self._shown = text
        self.last_text = text.plain
        self.update(text, layout=False)  # one line, always: a repaint, never a layout of the screen
