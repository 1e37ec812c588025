"""ConfirmScreen: one key to confirm a destructive action (stop, restart) on a running server."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Label

from tui.screens.dialog import Dialog


class ConfirmScreen(Dialog[bool]):
    """Dismisses with True on `y` (or enter), False on `n`, `esc` or any other key."""

    CSS_PATH = "confirm.tcss"
    BINDINGS = [Binding("y,enter", "dismiss(True)", "Yes", id="confirm-yes"),
                Binding("n,escape", "dismiss(False)", "No", id="confirm-no")]
    KEYS = "y: yes   any other key: no"

    def __init__(self, question: str, detail: str = "") -> None:
        super().__init__()
        self.question, self.detail = question, detail

    def heading(self) -> str:
        return self.question

    def compose_body(self) -> ComposeResult:
        if self.detail:
            yield Label(self.detail, id="detail", markup=False)

    def on_key(self, event: events.Key) -> None:
        """A one-key question: whatever is not `y`/enter means no, and never reaches the screen below."""
        if event.key not in ("y", "enter"):
            event.stop()
            event.prevent_default()
            self.dismiss(False)
