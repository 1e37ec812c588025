"""Transcript: the chat log, with a cursor over the replies and their code blocks.

`up` in the chat input moves focus here, onto the last reply. Here (and only here) a few letters are
commands, because the input does not have focus: up/down (k/j) move the cursor over each reply and
each code block inside it, `y` copies what is under the cursor, `o` lists the saved conversations,
`s` opens this chat's settings; enter, `i` or esc go back to the input, and any other printable key
goes back to the input as text (the main screen routes it there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual import events
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widget import Widget

from backend.clipboard import CodeBlock, code_blocks
from tui.widgets.reply import ReplyView


@dataclass
class Item:
    reply: ReplyView
    number: int  # the reply's place, from 1
    block: CodeBlock | None = None
    block_number: int = 0

    @property
    def text(self) -> str:
        return self.block.code if self.block is not None else self.reply.source

    def describe(self, replies: int) -> str:
        if self.block is not None:
            return f"code block {self.block_number} ({self.block.describe()}) in reply {self.number} of {replies}"
        return f"reply {self.number} of {replies}"


class Transcript(VerticalScroll, can_focus=True):
    BINDINGS = [
        Binding("up,k", "move(-1)", "Previous", id="transcript-prev"),
        Binding("down,j", "move(1)", "Next", id="transcript-next"),
        Binding("y", "command('copy')", "Copy", id="transcript-copy"),
        Binding("o", "command('open')", "Saved chats", id="transcript-open"),
        Binding("s", "command('settings')", "Chat settings", id="transcript-settings"),
        Binding("enter,i,escape", "command('back')", "Back to the input", id="transcript-back"),
    ]
    # the letters above: handled here before the main screen sends printable keys to the input
    LETTERS = {"k": "move(-1)", "j": "move(1)", "y": "command('copy')", "o": "command('open')",
               "s": "command('settings')", "i": "command('back')"}

    class Command(Message):
        """A key pressed on the transcript: copy (with `item`), open, settings, back."""

        def __init__(self, name: str, item: Item | None = None) -> None:
            super().__init__()
            self.name, self.item = name, item

    class CursorMoved(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, *children: Widget, **kwargs: Any) -> None:
        super().__init__(*children, **kwargs)
        self.cursor = -1

    def items(self) -> list[Item]:
        out: list[Item] = []
        for n, reply in enumerate(self.query(ReplyView).results(ReplyView), 1):
            out.append(Item(reply, n))
            out += [Item(reply, n, b, i) for i, b in enumerate(code_blocks(reply.source), 1)]
        return out

    def current(self) -> Item | None:
        items = self.items()
        return items[self.cursor] if 0 <= self.cursor < len(items) else None

    def on_focus(self) -> None:
        items = self.items()
        if not items:
            self.post_message(self.CursorMoved("no reply yet: enter or any letter goes back to the input"))
            return
        # the last reply itself (not its last code block), unless the cursor is already on one
        if not 0 <= self.cursor < len(items):
            self.cursor = max(i for i, it in enumerate(items) if it.block is None)
        self._show(items)

    def on_blur(self) -> None:
        for reply in self.query(ReplyView).results(ReplyView):
            reply.remove_class("-cursor")

    def _show(self, items: list[Item]) -> None:
        item = items[self.cursor]
        for reply in self.query(ReplyView).results(ReplyView):
            reply.set_class(reply is item.reply, "-cursor")
        self.scroll_to_widget(item.reply, animate=False)
        replies = max(it.number for it in items)
        self.post_message(self.CursorMoved(f"{item.describe(replies)} · y copy · ↑↓ move · o conversations · "
                                           "s settings · enter back to the input"))

    async def on_key(self, event: events.Key) -> None:
        action = self.LETTERS.get(event.key)
        if action is None:
            return  # other printable keys go on to the screen, which puts them in the input
        event.stop()
        event.prevent_default()
        await self.run_action(action)

    def action_move(self, step: int) -> None:
        items = self.items()
        if items:
            self.cursor = min(len(items) - 1, max(0, self.cursor + step))
            self._show(items)

    def action_command(self, name: str) -> None:
        self.post_message(self.Command(name, self.current() if name == "copy" else None))
