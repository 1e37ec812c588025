"""ContextFitScreen: a message that would not fit in max_model_len was not sent; drop the oldest
exchanges from the context (`d`), lower max_tokens (`m`), or keep editing (esc). Dismisses with
"drop", "lower" or None."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.widgets import Label

from tui.screens.dialog import Dialog


class ContextFitScreen(Dialog[str | None]):
    CSS_PATH = "context_fit.tcss"
    KEYS = "esc: keep editing (the message stays in the input)"

    def __init__(self, refusal: str, drop: int | None, lower_to: int) -> None:
        super().__init__()
        self.refusal, self.drop, self.lower_to = refusal, drop, lower_to

    def heading(self) -> str:
        return self.refusal

    def compose_body(self) -> ComposeResult:
        options = []
        if self.drop:
            options.append(f"d: leave the oldest {self.drop} exchange{'s' if self.drop != 1 else ''} out of the "
                           "context (kept in the conversation and its file, no longer sent), then send")
        if self.lower_to >= 1:
            options.append(f"m: lower this chat's max_tokens to {self.lower_to}, then send")
        if not options:
            options.append("neither dropping old exchanges nor a smaller max_tokens makes it fit: shorten it")
        yield Label("\n".join(options), id="detail", markup=False)

    def on_key(self, event: events.Key) -> None:
        event.stop()
        event.prevent_default()
        if event.key == "d" and self.drop:
            self.dismiss("drop")
        elif event.key == "m" and self.lower_to >= 1:
            self.dismiss("lower")
        elif event.key in ("escape", "n", "q"):
            self.dismiss(None)
