"""ExposureScreen: before a start that binds beyond loopback without an API key, one key to go on
("reachable from the network without a key"), any other way out cancels."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Static


class ExposureScreen(ModalScreen[bool]):
    """Dismisses with True (start anyway) or False (cancel)."""

    CSS_PATH = "exposure.tcss"
    BINDINGS = [Binding("y", "dismiss(True)", "Start without a key", id="confirm"),
                Binding("escape,n", "dismiss(False)", "Cancel", id="cancel")]

    def __init__(self, warning: str) -> None:
        super().__init__()
        self.warning = warning

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Reachable from the network without a key", id="question")
            yield Static(self.warning, id="warning")
            yield Label("y: start anyway   esc / n: cancel (then `qwen-tui gen-key` and server.api_key_file)",
                        id="keys")
