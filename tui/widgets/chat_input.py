"""ChatInput: the chat's Input, whose typing repaints only itself.

Textual 8.2's Input sets its `virtual_size` on every change of its value, and that reactive asks
for a layout of the whole screen: with a long reply in the chat log each key cost ~10 ms of layout,
most of the event loop's time while someone typed during a stream (benchmarks/bench_render.py).
An Input is not a container; its width comes from the CSS, not from its text, so a repaint is
enough. Everything else (cursor, scrolling, suggestions, validation, Changed) is Input's own.
"""

from __future__ import annotations

from textual.widgets import Input


class ChatInput(Input):
    def _watch_value(self, value: str) -> None:
        real = self.refresh
        # for this one call only (restored below): Input's watcher asks refresh(layout=True); mypy
        # forbids assigning to a method, which is the point here
        self.refresh = lambda *a, layout=False, **kw: real(*a, **kw)  # type: ignore[method-assign]
        try:
            super()._watch_value(value)
        finally:
            del self.refresh
