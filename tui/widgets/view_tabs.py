"""ViewTabs: the one-line bar above the log and the chat, saying which is shown; a click on a name
shows it (`c` toggles them from the keyboard).

Textual's TabbedContent drew the same two names with eleven widgets (tabs, their scroll
container, an animated underline, a content switcher, a pane per tab): ~19 ms of the console's
first frame here (benchmarks/README.md). The main screen shows and hides the views itself."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.message import Message
from textual.widgets import Static

VIEWS = (("log", "Log"), ("chat", "Chat"))
GAP = 2  # columns between two names


class ViewTabs(Static):
    DEFAULT_CSS = """
    ViewTabs { height: 1; padding: 0 1; }
    """

    class Picked(Message):
        """A view's name was clicked."""

        def __init__(self, view: str) -> None:
            super().__init__()
            self.view = view

    def __init__(self, active: str = "log", **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.active = active
        self.update(self._text())

    def show(self, view: str) -> None:
        if view != self.active:
            self.active = view
            self.update(self._text())

    def _text(self) -> Text:
        text = Text()
        for i, (view, label) in enumerate(VIEWS):
            if i:
                text.append(" " * GAP)
            # the shown one reversed, the other dim: readable without colour too
            text.append(f" {label} ", style="bold reverse" if view == self.active else "dim")
        return text

    def view_at(self, x: int) -> str | None:
        """The view whose name is at column x of the content (None: between or past the names)."""
        start = 0
        for view, label in VIEWS:
            end = start + len(label) + 2
            if start <= x < end:
                return view
            start = end + GAP
        return None

    def on_click(self, event: events.Click) -> None:
        view = self.view_at(event.x - self.styles.padding.left)
        if view is not None:
            self.post_message(self.Picked(view))
