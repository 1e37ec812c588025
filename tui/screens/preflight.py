"""PreflightScreen: before a start, what the memory ledger says will make this launch fail (weights
over the budget, a KV cache too small for max_model_len, TP not dividing the heads, ...), each with
its fix. Start anyway (f), open the settings (e), or cancel (esc)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from tui.palette import style
from tui.screens.dialog import Dialog


def blocking(plan: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The plan's problems of severity "error": the launch would fail with them."""
    return [p for p in (plan or {}).get("problems") or [] if p.get("severity") == "error"]


class PreflightScreen(Dialog[str | None]):
    """Dismisses with "force", "settings" or None."""

    CSS_PATH = "preflight.tcss"
    BINDINGS = [Binding("f", "dismiss('force')", "Start anyway", id="force"),
                Binding("e", "dismiss('settings')", "Settings", id="settings"),
                Binding("escape", "dismiss(None)", "Cancel", id="cancel")]
    HEADING = "The memory ledger says this launch will fail:"
    KEYS = "e: edit the settings   f: start anyway   esc: cancel"

    def __init__(self, problems: list[dict[str, Any]]) -> None:
        super().__init__()
        self.problems = problems

    def compose_body(self) -> ComposeResult:
        text = Text()
        for p in self.problems:
            text.append(f"{p['kind']}: ", style(self.app, "error", "bold"))
            text.append(f"{p['message']}\n")
            text.append(f"  fix: {p['fix']}\n", "italic")
        yield Static(text, id="problems")
