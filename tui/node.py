"""QwenNode: what mypy is told of `self.app` in the console's screens and widgets.

Textual types `self.app` as `App[Any]`, so `self.app.settings` (or `.client`, `.gpus`) went
unchecked. Mixed in first (`class X(QwenNode, Screen[None])`), QwenNode narrows it to ConsoleApp
(tui/console_app.py, the part of QwenApp the screens use) the way Textual documents
(`app = getters.app(ConsoleApp)`), for the type checker only: at run time QwenNode is an empty class,
not a DOMNode (no CSS type name, no bindings), and `app` stays Textual's own."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual import getters
    from textual.message_pump import MessagePump

    from tui.console_app import ConsoleApp

    class QwenNode(MessagePump):
        app = getters.app(ConsoleApp)
else:
    class QwenNode:
        pass
