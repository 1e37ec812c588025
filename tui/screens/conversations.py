"""ConversationsScreen: the saved conversations (title, date, model, messages) to reopen one;
`r` renames, `d` deletes (after a `y`), `x` exports it to Markdown. Dismisses with the id to open."""

from __future__ import annotations

import asyncio
import time

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Input, Label

from backend.chat.store import Store, StoreError, Summary
from tui.screens.dialog import Dialog


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


class ConversationsScreen(Dialog[str | None]):
    CSS_PATH = "conversations.tcss"
    BINDINGS = [
        Binding("r", "rename", "Rename", id="conversations-rename"),
        Binding("d", "delete", "Delete", id="conversations-delete"),
        Binding("x", "export", "Export to Markdown", id="conversations-export"),
        Binding("escape", "close", "Close", id="conversations-close"),
    ]
    HEADING = "Saved conversations"
    KEYS = "enter: reopen · r: rename · d: delete · x: export to Markdown · esc: close"

    class Listed(Message):
        def __init__(self, rows: list[Summary], error: str = "") -> None:
            super().__init__()
            self.rows, self.error = rows, error

    def __init__(self, store: Store, current: str = "") -> None:
        super().__init__()
        self.store, self.current = store, current
        self.rows: list[Summary] = []

    def compose_body(self) -> ComposeResult:
        yield DataTable(id="conversations", cursor_type="row", zebra_stripes=True)
        yield Input(placeholder="new title (enter: save, esc: cancel)", id="rename")
        yield Label("", id="detail", markup=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("title", "updated", "model", "messages")
        self.query_one("#rename", Input).display = False
        self.reload()

    @work(group="conversations", exclusive=True, exit_on_error=False)
    async def reload(self) -> None:
        try:
            rows = await asyncio.to_thread(self.store.list)
            self.post_message(self.Listed(rows))
        except OSError as e:
            self.post_message(self.Listed([], f"cannot read {self.store.root}: {e.strerror or e}"))

    @on(Listed)
    def listed(self, message: Listed) -> None:
        self.rows = message.rows
        table = self.query_one(DataTable)
        table.clear()
        for s in self.rows:
            mark = "● " if s.id == self.current else ""
            table.add_row(mark + s.title, _when(s.updated), s.model or "?", str(s.messages), key=s.id)
        detail = message.error or (f"{len(self.rows)} saved in {self.store.root}" if self.rows else
                                   f"none saved yet: a conversation is saved from its first reply ({self.store.root})")
        self.query_one("#detail", Label).update(detail)
        table.focus()

    def _selected(self) -> Summary | None:
        table = self.query_one(DataTable)
        if not self.rows or table.cursor_row is None or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row]

    @on(DataTable.RowSelected)
    def open_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            self.dismiss(str(event.row_key.value))

    def action_close(self) -> None:
        box = self.query_one("#rename", Input)
        if box.display:
            box.display = False
            self.query_one(DataTable).focus()
            return
        self.dismiss(None)

    def action_rename(self) -> None:
        s = self._selected()
        if s is None:
            return
        box = self.query_one("#rename", Input)
        box.value, box.display = s.title, True
        box.focus()

    @on(Input.Submitted, "#rename")
    def renamed(self, event: Input.Submitted) -> None:
        s = self._selected()
        event.input.display = False
        if s is None:
            return
        try:
            self.store.rename(s.id, event.value)
        except StoreError as e:
            self.notify(str(e), severity="error")
        self.reload()

    def action_delete(self) -> None:
        from tui.screens.confirm import ConfirmScreen  # start-up: loaded on first use, not with the console

        s = self._selected()
        if s is None:
            return

        def done(yes: bool | None) -> None:
            if not yes:
                return
            try:
                self.store.delete(s.id)
                self.notify(f"deleted “{s.title}”")
            except StoreError as e:
                self.notify(str(e), severity="error")
            self.reload()

        self.app.push_screen(ConfirmScreen(f"Delete “{s.title}”?", f"{s.messages} messages; its file "
                                           f"{s.path.name} is removed for good"), done)

    def action_export(self) -> None:
        from backend.chat.conversation import to_markdown  # start-up: loaded on first use, not with the console
        from backend.chat.store import exports_dir, write_export  # start-up: loaded on first use

        s = self._selected()
        if s is None:
            return
        path = exports_dir() / f"{s.id}.md"
        try:
            write_export(path, to_markdown(self.store.load(s.id)))  # 0600 in 0700, as the conversations
        except (StoreError, OSError) as e:
            self.notify(f"not exported: {e}", severity="error")
            return
        self.query_one("#detail", Label).update(f"exported to {path}")
        self.notify(f"exported to {path}", timeout=10)
