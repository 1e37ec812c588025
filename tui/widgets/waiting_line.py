"""WaitingLine: "waiting for the first token… N s" under a sent message until the reply starts.

A server that accepts the connection and then says nothing (stuck, SIGSTOPped, loading a huge
prompt) otherwise leaves only the user's line on screen. The line counts itself once a second while
it is mounted; the chat pane removes it at the first delta or at the end.
"""

from __future__ import annotations

import time
from typing import Any

from textual.widgets import Static


class WaitingLine(Static):
    DEFAULT_CSS = "WaitingLine { color: $text-muted; height: 1; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(self.text(0), markup=False, **kwargs)
        self.started = time.monotonic()

    @staticmethod
    def text(seconds: float) -> str:
        return f"waiting for the first token… {seconds:.0f} s (esc stops)"

    def on_mount(self) -> None:
        self.set_interval(1.0, self.tick)

    def tick(self) -> None:
        self.update(self.text(time.monotonic() - self.started))
