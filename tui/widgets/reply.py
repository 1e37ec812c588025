"""ReplyView: a reply streamed as Markdown without freezing the console.

A Markdown widget re-laid out per chunk made every chunk cost a full-screen layout of all its blocks
(~95 for a long reply): the keyboard froze for up to seconds (issue 16). Here the reply is a short
column of segments, each one Static holding a Rich Markdown renderable:

- finished segments are rendered once and never touched again; a segment closes at a blank line
  outside a code fence, once it holds about SEGMENT_CHARS characters and the next block has begun;
- only the last (open) segment is re-rendered, at most once per flush interval, and that interval
  follows what a render costs (4x the last one, 50-500 ms), so the event loop stays mostly free;
- `finish()` renders what is left. The segments' sources joined are exactly the reply's text
  (`source`), and each segment is cut where a Markdown block ends, so the final render is the
  reply's own Markdown.
"""

from __future__ import annotations

import re
import time

from textual.containers import Vertical
from textual.timer import Timer
from textual.widgets import Static

SEGMENT_CHARS = 1200
MIN_FLUSH_S, MAX_FLUSH_S, COST_FACTOR = 0.05, 0.5, 4.0
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_LIST_OR_INDENT = re.compile(r"^(\s|[-*+]\s|\d+[.)]\s)")


def settled_length(text: str, min_chars: int = SEGMENT_CHARS) -> int:
    """How much of `text` can be rendered for good: up to the last blank line outside any code
    fence, at least `min_chars` in, after which a new top-level block has begun (not an indented
    line or a list item: those could still belong to the block above). 0 when there is none."""
    if len(text) < min_chars:
        return 0
    cut, pos, fence, blank_at = 0, 0, "", None
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if not fence and stripped and blank_at is not None:
            if blank_at >= min_chars and not _LIST_OR_INDENT.match(line):
                cut = blank_at
            blank_at = None
        m = _FENCE.match(line)
        if m and not fence:
            fence = m.group(1)
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and stripped == m.group(1):
            fence = ""
        pos += len(line)
        if not fence and not stripped and line.endswith("\n"):
            blank_at = pos
    return cut


def _markdown(source: str):
    from rich.markdown import Markdown  # markdown-it and pygments: not before the first reply

    return Markdown(source)


class ReplyView(Vertical):
    """One streamed reply: `append()` text as it arrives, `finish()` at the end."""

    DEFAULT_CSS = """
    ReplyView { height: auto; }
    ReplyView > .segment { height: auto; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.segments: list[str] = []  # finished segments' sources
        self.tail = ""  # the open segment's source
        self.renders = 0
        self.interval = MIN_FLUSH_S
        self._shown = ""
        self._timer: Timer | None = None
        self._open: Static | None = None
        self.finished = False

    @property
    def source(self) -> str:
        """Everything appended so far, exactly."""
        return "".join(self.segments) + self.tail

    def compose(self):
        self._open = Static("", classes="segment")
        yield self._open

    def append(self, text: str) -> None:
        if not text or self.finished:
            return
        self.tail += text
        if self._timer is None and self.is_mounted:
            self._timer = self.set_timer(self.interval, self._flush)

    async def finish(self) -> None:
        """Render the rest now; nothing more is appended."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self.finished = True
        mounting = self._settle()
        self._render_open()
        if mounting is not None:
            await mounting

    def _flush(self) -> None:
        self._timer = None
        started = time.perf_counter()
        self._settle()
        self._render_open()
        self.call_after_refresh(self._measured, started)

    def _measured(self, started: float) -> None:
        cost = time.perf_counter() - started
        self.interval = min(MAX_FLUSH_S, max(MIN_FLUSH_S, cost * COST_FACTOR))
        if self.tail != self._shown and self._timer is None and not self.finished:
            self._timer = self.set_timer(self.interval, self._flush)

    def _settle(self):
        """Close finished segments: each is mounted before the open one and rendered once."""
        new: list[Static] = []
        while cut := settled_length(self.tail):
            done, self.tail = self.tail[:cut], self.tail[cut:]
            self.segments.append(done)
            new.append(Static(_markdown(done), classes="segment"))
        if new and self._open is not None:
            return self.mount_all(new, before=self._open)
        return None

    def _render_open(self) -> None:
        if self._open is None or self.tail == self._shown:
            return
        self._shown = self.tail
        self.renders += 1
        self._open.update(_markdown(self.tail) if self.tail.strip() else "")
