"""ReplyView: a reply streamed as Markdown without freezing the console.

A Markdown widget re-laid out per chunk made every chunk cost a full-screen layout of all its blocks
(~95 for a long reply): the keyboard froze for up to seconds (issue 16). Here the reply is a short
column of segments (MarkdownSegment: Markdown source rendered by Rich once per width into lines):

- finished segments are rendered once and never touched again; a segment closes at a blank line
  outside a code fence, once it holds about SEGMENT_CHARS characters and the next block has begun;
- only the last (open) segment is re-rendered, at most once per flush interval, and that interval
  follows what a render costs (4x the last one, 50-500 ms), so the event loop stays mostly free;
- the open segment's height is reserved RESERVE_LINES ahead of its text: a render that fits is a
  repaint of that widget only, not a layout of the whole screen (that layout was the cost);
- `finish()` renders what is left. The segments' sources joined are exactly the reply's text
  (`source`), and each segment is cut where a Markdown block ends, so the final render is the
  reply's own Markdown.
"""

from __future__ import annotations

import re
import time

from textual.containers import Vertical
from textual.geometry import Size
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget

SEGMENT_CHARS = 1200
MIN_FLUSH_S, MAX_FLUSH_S, COST_FACTOR = 0.05, 0.5, 4.0
RESERVE_LINES = 4  # the open segment's height runs this far ahead of its text
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


class MarkdownSegment(Widget):
    """A piece of Markdown rendered once per width into lines, then drawn line by line (Textual's
    Static would render it twice: to measure its height and to paint it)."""

    DEFAULT_CSS = "MarkdownSegment { height: auto; }"

    def __init__(self, source: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.source = source
        self._strips: list[Strip] = []
        self._width = -1

    def lines_at(self, width: int) -> int:
        """Render at `width` (cached); the number of lines."""
        if width != self._width:
            self._width = width
            self._strips = []
            if self.source.strip() and width > 0:
                console = self.app.console
                lines = console.render_lines(_markdown(self.source), console.options.update_width(width), pad=False)
                self._strips = [Strip(line) for line in lines]
        return len(self._strips)

    def set_source(self, source: str) -> int:
        """New source; renders now at the current width and returns its line count."""
        self.source, self._width = source, -1
        return self.lines_at(self.content_size.width)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self.lines_at(width)

    def render_line(self, y: int) -> Strip:
        self.lines_at(self.content_size.width)
        return self._strips[y] if y < len(self._strips) else Strip.blank(self.content_size.width)


class ReplyView(Vertical):
    """One streamed reply: `append()` text as it arrives, `finish()` at the end."""

    DEFAULT_CSS = """
    ReplyView { height: auto; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.segments: list[str] = []  # finished segments' sources
        self.tail = ""  # the open segment's source
        self.renders = 0
        self.interval = MIN_FLUSH_S
        self._shown = ""
        self._timer: Timer | None = None
        self._open: MarkdownSegment | None = None
        self._reserved = 0
        self.finished = False

    @property
    def source(self) -> str:
        """Everything appended so far, exactly."""
        return "".join(self.segments) + self.tail

    def compose(self):
        self._open = MarkdownSegment(classes="segment open")
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
        if self._open is not None:
            self._reserved = 0
            self._open.styles.height = "auto"  # no reserved lines under a finished reply
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
        new: list[MarkdownSegment] = []
        while cut := settled_length(self.tail):
            done, self.tail = self.tail[:cut], self.tail[cut:]
            self.segments.append(done)
            new.append(MarkdownSegment(done, classes="segment"))
        if new and self._open is not None:
            return self.mount_all(new, before=self._open)
        return None

    def _render_open(self) -> None:
        """Re-render the open segment. Its height is reserved a few lines ahead, so most renders
        are a repaint of this widget alone, not a layout of the whole screen."""
        if self._open is None or self.tail == self._shown:
            return
        self._shown = self.tail
        self.renders += 1
        needed = self._open.set_source(self.tail)
        if self.finished or self._open.content_size.width <= 0:
            self._reserved = 0
            self._open.styles.height = "auto"
            self._open.refresh(layout=True)
        elif needed > self._reserved or needed < self._reserved - 2 * RESERVE_LINES:
            self._reserved = needed + RESERVE_LINES
            self._open.styles.height = self._reserved  # a layout, once per RESERVE_LINES lines
        else:
            self._open.refresh()  # same height: repaint this widget only
