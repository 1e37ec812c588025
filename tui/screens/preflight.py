"""PreflightScreen: before a start, what the memory ledger says will make this launch fail (weights
over the budget, a KV cache too small for max_model_len, TP not dividing the heads, ...), each with
its fix. Apply the one-key fix and start (a: the fix the failure banner would offer after a wasted
start, backend/fixes.py), start anyway (f), open the settings (e), or cancel (esc)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from tui.palette import style
from tui.screens.dialog import Dialog
from tui.widgets.failure_banner import fix_text


def blocking(plan: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The plan's problems of severity "error": the launch would fail with them."""
    return [p for p in (plan or {}).get("problems") or [] if p.get("severity") == "error"]


class PreflightScreen(Dialog[str | None]):
    """Dismisses with "fix", "force", "settings" or None."""

    CSS_PATH = "preflight.tcss"
    BINDINGS = [Binding("a", "apply_fix", "Apply the fix and start", id="fix"),
                Binding("f", "dismiss('force')", "Start anyway", id="force"),
                Binding("e", "dismiss('settings')", "Settings", id="settings"),
                Binding("escape", "dismiss(None)", "Cancel", id="cancel")]
    HEADING = "The memory ledger says this launch will fail:"
    KEYS = "e: edit the settings   f: start anyway   esc: cancel"

    def __init__(self, problems: list[dict[str, Any]], fix: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.problems = problems
        self.fix = fix  # backend.fixes.Proposal.to_dict(), or None when no settings change fixes it

    def action_apply_fix(self) -> None:
        if self.fix and self.fix.get("applicable"):
            self.dismiss("fix")
        else:
            self.notify("no one-key fix here: e edits the settings", severity="warning")

    def compose_body(self) -> ComposeResult:
        text = Text()
        for p in self.problems:
            text.append(f"{p['kind']}: ", style(self.app, "error", "bold"))
            text.append(f"{p['message']}\n")
            text.append(f"  fix: {p['fix']}\n", "italic")
        if self.fix:
            text.append_text(fix_text(self.fix, "a: apply the fix and start"))
        yield Static(text, id="problems")

    def keys_line(self) -> str:
        return ("a: apply the fix   " if self.fix and self.fix.get("applicable") else "") + self.KEYS
