"""EventsScreen (key j): the journal of this state dir, newest last: who started, stopped, restarted,
saved which setting, from where, and how it ended (backend/events.py). The keys --watch leaves out
are WATCH_BLOCKED in tui/console_app.py."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Label, Static

from tui.screens.dialog import Dialog

SHOWN = 200


def table(rows: list[tuple[str, ...]]) -> Table:
    """The rows as columns as wide as their widest cell; only the last (how it ended) wraps, under
    itself, so a long outcome never pushes a row's start out of line at 80 columns."""
    grid = Table.grid(padding=(0, 1))
    for _ in range(len(rows[0]) - 1):
        grid.add_column(no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")
    for row in rows:
        grid.add_row(*(Text(cell) for cell in row))  # text, not markup: a path may hold [brackets]
    return grid


class EventsScreen(Dialog[None]):
    DEFAULT_CSS = """
    EventsScreen #dialog { width: 96%; height: 90%; border: round $accent; padding: 0 1; }
    EventsScreen #events { height: 1fr; }
    EventsScreen #keys { margin-top: 0; }
    """
    BINDINGS = [Binding("escape", "dismiss(None)", "Close", id="close"),
                Binding("j", "dismiss(None)", "Close", id="close-j", show=False)]
    KEYS = "esc: close"

    def compose_body(self) -> ComposeResult:
        from backend import events  # start-up: loaded on first use, not before the console's first frame

        body: str | Table
        try:
            rows = events.read_events(SHOWN)
            head = f"Events ({events.journal_path()}): newest last"
            body = table([events.cells(e) for e in rows]) if rows else "no events yet"
        except PermissionError:
            head, body = "Events", f"cannot read {events.journal_path()}: permission denied"
        yield Label(head, id="question", markup=False)  # the heading: read with the rows
        with VerticalScroll(id="events"):
            yield Static(body, id="rows", markup=False)

    def on_mount(self) -> None:
        self.query_one("#events", VerticalScroll).scroll_end(animate=False)
