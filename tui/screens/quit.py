"""QuitScreen: leave the server running, or stop it, when the console quits."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.widgets import Button, Label

from tui.screens.dialog import Dialog


class QuitScreen(Dialog[str]):
    """Dismisses with "keep", "stop" or "cancel". Dialog's frame, its own layout: a grid of buttons."""

    CSS_PATH = "quit.tcss"
    BINDINGS = [Binding("escape", "dismiss('cancel')", "Cancel", id="cancel"),
                Binding("k", "dismiss('keep')", "Keep", id="keep"),
                Binding("s", "dismiss('stop')", "Stop", id="stop")]

    def compose(self) -> ComposeResult:
        with Grid(id="dialog"):
            yield Label("The server is running. Leave it running after the console quits?", id="question")
            # "k: …", not "… [k]": a label is markup, where [k] was a tag and vanished
            yield Button("k: keep running", variant="primary", id="keep")
            yield Button("s: stop server", variant="error", id="stop")
            yield Button("esc: cancel", id="cancel")

    @on(Button.Pressed)
    def choose(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id)
