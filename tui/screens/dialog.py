"""Dialog: the frame every modal dialog of the console shares.

A box centred on the dimmed screen below (#dialog: border, surface, padding, never larger than the
screen), an optional title line (#question, HEADING), the dialog's own body (compose_body), and its
keys line last (#keys, muted, KEYS); esc closes it (dismissed with None) unless the dialog binds esc
itself. The frame's rules live here, once, as default CSS: a dialog's own .tcss (nested under its
type) sets only what is its own (width, height, border colour, its widgets) and wins over these."""

from __future__ import annotations

from typing import ClassVar, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label

from tui.node import QwenNode

ResultT = TypeVar("ResultT")


class Dialog(QwenNode, ModalScreen[ResultT]):
    DEFAULT_CSS = """
    Dialog {
        align: center middle;
        & > #dialog {
            border: thick $primary;
            background: $surface;
            padding: 1 2;
            height: auto;
            max-width: 100%;
            max-height: 100%;
        }
        & #keys { margin-top: 1; color: $text-muted; }
        & #question { width: 1fr; }
        /* a dialog's own lines wrap to its width: a Label is as wide as its text, cut at the
           dialog's edge otherwise (80x24: the keys lines lost their ends) */
        & #dialog Label { max-width: 100%; }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close", id="close")]

    HEADING: ClassVar[str] = ""  # the title line (#question); none when empty
    KEYS: ClassVar[str] = ""  # the keys line (#keys), plain text

    def heading(self) -> str:
        return self.HEADING

    def keys_line(self) -> str:
        return self.KEYS

    def compose_body(self) -> ComposeResult:
        """What the dialog shows between its title and its keys line."""
        yield from ()

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            heading = self.heading()
            if heading:
                yield Label(heading, id="question", markup=False)
            yield from self.compose_body()
            keys = self.keys_line()
            if keys:
                yield Label(keys, id="keys", markup=False)

    def action_close(self) -> None:
        self.dismiss()
