"""QwenNode: what mypy is told of `self.app` in the console's screens and widgets.

Textual types `self.app` as `App[Any]`, so `self.app.settings` (or `.client`, `.gpus`) went
unchecked. Mixed in first (`class X(QwenNode, Screen[None])`), QwenNode narrows it to QwenApp the way
Textual documents (`app = getters.app(QwenApp)`), for the type checker only: at run time that getter
would import tui.app (which imports every screen) while the screens are defined, so QwenNode is an
empty class there, not a DOMNode (no CSS type name, no bindings), and `app` stays Textual's own."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual import getters
    from textual.message_pump import MessagePump

    from tui.app import QwenApp

    class QwenNode(MessagePump):
        app = getters.app(QwenApp)
else:
    class QwenNode:
        pass
