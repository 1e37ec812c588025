"""ReplyView: a reply streamed as Markdown without freezing the console.

A Markdown widget re-laid out per chunk made every chunk cost a full-screen layout of all its blocks
(~95 for a long reply): the keyboard froze for up to seconds (issue 16). The first ReplyView rendered
Rich Markdown on the event loop at each flush; a profile at 1,000 tok/s then put most of the long
stalls in Rich (code blocks through pygments and tables: 10-70 ms a render, the open segment rendered
again whole each time) and in the cyclic GC (40-80 ms full collections). Here:

- the block still streaming (after the last blank line outside a code fence) is drawn as plain
  wrapped text, which costs next to nothing;
- the blocks that finished since the last flush (only those) are rendered as Markdown on the event
  loop in slices of SLICE_S (Rich renders element by element, lazily), so keys and chunks go on in
  between; a long text is parsed in a thread;
- once the open segment's finished part reaches SEGMENT_CHARS it is closed: kept as a
  MarkdownSegment with the lines already rendered, never rendered again (but at a new width);
- the open segment's height is reserved ahead of its text (RESERVE_LINES, more when the text grows
  faster: as many lines as it grew since the last layout, up to MAX_RESERVE_LINES): a render that fits
  is a repaint of that widget only, not a layout and repaint of the whole chat;
- the flush interval follows the cost measured on the loop (4x the last flush and the refresh after
  it, 50-500 ms);
- full GC collections wait while a reply streams (FullCollectionsDeferred);
- `finish()` renders the whole reply once (in slices) and shows that render: the final reply is
  exactly Rich's one-shot Markdown of its text (`source`), whatever the cuts were while streaming.
"""

from __future__ import annotations

import asyncio
import gc
import io
import re
import time
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Size
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget

if TYPE_CHECKING:  # start-up: Rich's console and Markdown load with the first reply
    from rich.console import Console
    from rich.markdown import Markdown

SEGMENT_CHARS = 1200
MIN_FLUSH_S, MAX_FLUSH_S, COST_FACTOR = 0.05, 0.5, 4.0
SLICE_S = 0.004  # the longest the event loop renders Markdown before it lets other work in
RESERVE_LINES, MAX_RESERVE_LINES = 4, 12  # the open segment's height runs this far ahead of its text
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_LIST_OR_INDENT = re.compile(r"^(\s|[-*+]\s|\d+[.)]\s)")


def settled_length(text: str, min_chars: int = SEGMENT_CHARS) -> int:
    """How much of `text` is finished Markdown: up to the last blank line outside any code fence,
    at least `min_chars` in, after which a new top-level block has begun (an indented line or a list
    item after a list could still belong to that list). 0 when there is none."""
    if len(text) < min_chars:
        return 0
    cut, pos, fence, blank_at, block_first = 0, 0, "", None, ""
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if not fence and stripped and blank_at is not None:
            continues = _LIST_OR_INDENT.match(line) and _LIST_OR_INDENT.match(block_first)
            if blank_at >= min_chars and not continues:
                cut = blank_at
            if not continues:
                block_first = line
            blank_at = None
        elif not fence and stripped and not block_first:
            block_first = line
        m = _FENCE.match(line)
        if m and not fence:
            fence = m.group(1)
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and stripped == m.group(1):
            fence = ""
        pos += len(line)
        if not fence and not stripped and line.endswith("\n"):
            blank_at = pos
    return cut


class FullCollectionsDeferred:
    """While a reply streams, the cyclic GC's full (generation 2) collections wait: one takes 40-80 ms
    of the event loop in this app, a stall right in the stream (Textual pauses the GC the same way
    while it scrolls). Young garbage is still collected (generations 0 and 1); the thresholds come
    back when the last streaming reply ends."""

    active = 0
    saved: tuple[int, int, int] | None = None

    @classmethod
    def begin(cls) -> None:
        if cls.active == 0:
            cls.saved = gc.get_threshold()
            gc.set_threshold(cls.saved[0], cls.saved[1], 1_000_000)
        cls.active += 1

    @classmethod
    def end(cls) -> None:
        cls.active = max(0, cls.active - 1)
        if cls.active == 0 and cls.saved is not None:
            gc.set_threshold(*cls.saved)
            cls.saved = None


def _console(width: int) -> Console:
    from rich.console import Console  # start-up: loaded on first use, not before the console's first frame

    return Console(width=width, file=io.StringIO(), color_system="truecolor", markup=False, highlight=False,
                   emoji=False, legacy_windows=False, force_terminal=True, safe_box=False, soft_wrap=False,
                   _environ={})


def _parse(source: str) -> Markdown:
    from rich.markdown import Markdown  # markdown-it and pygments: not before the first reply

    return Markdown(source)


async def render_markdown(source: str, width: int, slice_s: float = SLICE_S, parse_in_thread: bool = False
                          ) -> list[Strip]:
    """Markdown source as lines `width` cells wide, rendered on the event loop in slices of about
    `slice_s` (Rich renders element by element, lazily), so that keys and chunks go on between
    them. Parsing takes about 1 ms per 1,000 characters: `parse_in_thread` for a long text (a thread
    returning a parsed document; it touches no widget)."""
    from rich.segment import Segment  # start-up: loaded on first use, not before the console's first frame

    if not source.strip() or width <= 0:
        return []
    md = await asyncio.to_thread(_parse, source) if parse_in_thread else _parse(source)
    console = _console(width)
    strips: list[Strip] = []
    deadline = time.perf_counter() + slice_s
    for line in Segment.split_and_crop_lines(console.render(md, console.options), width, pad=True):
        strips.append(Strip(line))
        if time.perf_counter() >= deadline:
            await asyncio.sleep(0)
            deadline = time.perf_counter() + slice_s
    return strips


WARM_UP = ("# h\n\ntext **b** `c`\n\n- a\n1. b\n\n> q\n\n```python\nx = 1\n```\n\n"
           "| a | b |\n|---|--:|\n| 1 | 2 |\n\n---\n")


def warm_up() -> None:
    """Import and build once, in a thread before the first reply, what a first render would pay
    for on the event loop (markdown-it, Rich's tables, pygments and its Python lexer: ~100 ms)."""
    from rich.segment import Segment  # start-up: loaded on first use, not before the console's first frame

    console = _console(80)
    list(Segment.split_and_crop_lines(console.render(_parse(WARM_UP), console.options), 80, pad=False))


def render_plain(console: Console, text: str, width: int) -> list[Strip]:
    """Text as it streams: wrapped, no Markdown (cheap enough for the event loop)."""
    from rich.text import Text  # start-up: loaded on first use, not before the console's first frame

    if not text.strip() or width <= 0:
        return []
    lines = console.render_lines(Text(text.rstrip("\n")), console.options.update_width(width), pad=True)
    return [Strip(line) for line in lines]


class MarkdownSegment(Widget):
    """A piece of Markdown drawn line by line from lines rendered once per width (by
    render_markdown, in slices). Until new lines arrive it shows the ones it has, cropped or padded."""

    DEFAULT_CSS = "MarkdownSegment { height: auto; }"

    def __init__(self, source: str = "", strips: list[Strip] | None = None, width: int = -1,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source
        self._strips: list[Strip] = strips or []
        self._width = width if strips is not None else -1  # the width _strips were rendered at
        self._wanted = self._width  # the width a render was asked for
        self.renders = 0

    def lines_at(self, width: int) -> int:
        if width != self._wanted and width > 0:
            self._wanted = width
            self.renders += 1
            self.run_worker(self._render_at(width), group="render", exclusive=True, exit_on_error=False)
        return len(self._strips)

    async def _render_at(self, width: int) -> None:
        """This widget's own render, on the event loop in slices (no I/O). Not `_render`: that is
        Widget._render(), which Textual calls to get the text of a mouse selection."""
        strips = await render_markdown(self.source, width, parse_in_thread=len(self.source) > SEGMENT_CHARS)
        if width == self._wanted:
            self._strips, self._width = strips, width
            self.refresh(layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self.lines_at(width)

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        if y < len(self._strips):
            strip = self._strips[y]
            return strip if self._width == width else strip.crop_extend(0, width, None)
        return Strip.blank(width)


class OpenSegment(Widget):
    """The segment being streamed: its finished blocks as Markdown lines, then the block still
    arriving as plain text."""

    DEFAULT_CSS = "OpenSegment { height: auto; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.md_source = ""
        self.md_strips: list[Strip] = []
        self.md_width = 0  # the width md_strips were rendered at
        self.plain_strips: list[Strip] = []
        self._lines: list[Strip] = []

    def compose_lines(self) -> int:
        gap = [Strip.blank(self.md_width)] if self.md_strips and self.plain_strips else []
        self._lines = self.md_strips + gap + self.plain_strips
        return len(self._lines)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines)

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        if y < len(self._lines):
            strip = self._lines[y]  # rendered padded to the width: drawn as it is
            return strip if strip.cell_length == width else strip.crop_extend(0, width, None)
        return Strip.blank(width)


class ReplyView(Vertical):
    """One streamed reply: `append()` text as it arrives, `finish()` at the end."""

    DEFAULT_CSS = """
    ReplyView { height: auto; }
    ReplyView MarkdownSegment.closed { margin-bottom: 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.segments: list[str] = []  # closed segments' sources
        self.tail = ""  # the open segment's source
        self.renders = 0  # flushes that drew something new
        self.md_renders = 0  # Markdown renders of the open segment's finished blocks
        self.interval = MIN_FLUSH_S
        self.finished = False
        self._shown = ""
        self._timer: Timer | None = None
        self._open: OpenSegment | None = None
        self._reserved = 0
        self._laid_out = 0  # the open segment's lines at its last layout
        self._rendering = False
        self._final: MarkdownSegment | None = None
        self._deferring = False

    @property
    def source(self) -> str:
        """Everything appended so far, exactly."""
        return "".join(self.segments) + self.tail

    def compose(self) -> ComposeResult:
        self._open = OpenSegment(classes="segment open")
        yield self._open

    def on_mount(self) -> None:
        if not self.finished and not self._deferring:
            self._deferring = True
            FullCollectionsDeferred.begin()

    def on_unmount(self) -> None:
        self._stop_deferring()

    def _stop_deferring(self) -> None:
        if self._deferring:
            self._deferring = False
            FullCollectionsDeferred.end()

    def append(self, text: str) -> None:
        if not text or self.finished:
            return
        self.tail += text
        if self._timer is None and self.is_mounted:
            self._timer = self.set_timer(self.interval, self._flush)

    async def finish(self) -> None:
        """The whole reply rendered once as Markdown, then shown instead of the streamed segments;
        nothing more is appended."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self.finished = True
        self._stop_deferring()
        if not self.is_attached:  # removed meanwhile (a new conversation)
            return
        self.workers.cancel_group(self, "open")
        width = self._width()
        source = self.source
        strips = await render_markdown(source, width, parse_in_thread=len(source) > SEGMENT_CHARS)
        self._final = MarkdownSegment(source, strips, width, classes="segment final")
        old = list(self.children)
        with self.app.batch_update():
            await self.mount(self._final)
            await self.remove_children(old)
        self._open = None

    def _width(self) -> int:
        return self.content_size.width or (self._open.content_size.width if self._open else 0)

    def _flush(self) -> None:
        self._timer = None
        started = time.perf_counter()
        self._draw()
        self.call_after_refresh(self._measured, started)

    def _measured(self, started: float) -> None:
        cost = time.perf_counter() - started
        self.interval = min(MAX_FLUSH_S, max(MIN_FLUSH_S, cost * COST_FACTOR))
        self._again()

    def _again(self) -> None:
        if self.tail != self._shown and self._timer is None and not self.finished:
            self._timer = self.set_timer(self.interval, self._flush)

    def _draw(self) -> None:
        """Plain text for the block still arriving; the finished blocks to Markdown, in slices."""
        seg = self._open
        width = self._width()
        if seg is None or self.finished or width <= 0 or self.tail == self._shown:
            return
        self._shown = self.tail
        self.renders += 1
        if seg.md_source and seg.md_width != width and not self._rendering:  # resized: render them again
            seg.md_source, seg.md_strips = "", []
        settled = settled_length(self.tail, 1)
        if settled > len(seg.md_source) and not self._rendering:
            self._rendering = True
            self.md_renders += 1
            self.run_worker(self._render_open(settled, width), group="open", exit_on_error=False)
        self._show_plain(seg)

    def _show_plain(self, seg: OpenSegment) -> None:
        rest = self.tail[len(seg.md_source):]
        seg.plain_strips = render_plain(self.app.console, rest, self._width())
        self._resize(seg, seg.compose_lines())

    async def _render_open(self, upto: int, width: int) -> None:
        """This widget's own render of the blocks that finished since the last one (not all of the
        open segment again), on the event loop in slices (no I/O). Pieces rendered apart can differ
        from one render by a blank line; finish() renders the whole reply once."""
        seg = self._open
        assert seg is not None
        done = len(seg.md_source)
        try:
            strips = await render_markdown(self.tail[done:upto], width)
        finally:
            self._rendering = False
        if self._open is not seg or self.finished or len(seg.md_source) != done:
            return
        if width != self._width():  # resized meanwhile: draw again at the new width
            seg.md_source, seg.md_strips = "", []
            self._shown = ""
            self._again()
            return
        gap = [Strip.blank(width)] if seg.md_strips and strips else []
        seg.md_source, seg.md_strips = self.tail[:upto], seg.md_strips + gap + strips
        seg.md_width = width
        if len(seg.md_source) >= SEGMENT_CHARS:  # close it: drawn from these lines from now on
            source, strips = seg.md_source, seg.md_strips
            self.segments.append(source)
            self.tail = self.tail[len(source):]
            seg.md_source, seg.md_strips = "", []
            self._shown = self.tail
            await self.mount(MarkdownSegment(source, strips, width, classes="segment closed"), before=seg)
        self._show_plain(seg)
        if settled_length(self.tail, 1) > len(seg.md_source):  # more finished meanwhile
            self._shown = ""
            self._again()

    def _resize(self, seg: OpenSegment, needed: int) -> None:
        """Its height is reserved a few lines ahead, so most draws are a repaint of this widget
        alone, not a layout of the whole screen."""
        if needed > self._reserved or needed < self._reserved - 2 * MAX_RESERVE_LINES:
            grew = needed - self._laid_out
            ahead = min(MAX_RESERVE_LINES, max(RESERVE_LINES, grew))
            self._reserved, self._laid_out = needed + ahead, needed
            seg.styles.height = self._reserved  # a layout, once per `ahead` lines
        seg.refresh()
