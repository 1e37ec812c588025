"""ExposureScreen: before a start that binds beyond loopback without an API key, one key to go on
("reachable from the network without a key"), any other way out cancels."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from tui.screens.dialog import Dialog


class ExposureScreen(Dialog[bool]):
    """Dismisses with True (start anyway) or False (cancel)."""

    CSS_PATH = "exposure.tcss"
    BINDINGS = [Binding("y", "dismiss(True)", "Start without a key", id="confirm"),
                Binding("escape,n", "dismiss(False)", "Cancel", id="cancel")]
    HEADING = "Reachable from the network without a key"
    KEYS = "y: start anyway   esc / n: cancel (then `qwen-tui gen-key` and server.api_key_file)"

    def __init__(self, warning: str) -> None:
        super().__init__()
        self.warning = warning

    def compose_body(self) -> ComposeResult:
        yield Static(self.warning, id="warning")
