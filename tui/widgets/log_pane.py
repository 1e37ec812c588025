"""LogPane: the live server log, bounded, with ERROR/WARNING highlighted and poll noise hidden."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, ClassVar

from rich.highlighter import Highlighter
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.containers import ScrollableContainer
from textual.markup import escape
from textual.widgets import Log

# The patterns are strings, compiled by re (and kept in its cache) on first use: compiling the nine
# of them cost ~1.2 ms of the console's start, which an empty log never needs.
# uvicorn access lines for the console's own polls would drown the log.
_POLL_NOISE = r'"GET /(health|metrics|v1/models) HTTP/1\.[01]" 200'


class VllmHighlighter(Highlighter):
    """Colours by regex; each rule names a theme variable, resolved by the pane (`use_theme`)."""

    RULES = [
        (r"\b(ERROR|CRITICAL)\b.*|Traceback.*|^\S*(Error|Exception)\b.*", "error", "bold"),
        (r"\bWARNING\b", "warning", ""),
        (r"^\((APIServer|EngineCore\w*|Worker\w*|VllmWorker[\w -]*)[^)]*\)", "secondary", ""),
        (r"\b\d[\d,]*(\.\d+)?\s*(GiB|GB|tokens|seconds|x)\b", "", "bold"),
    ]
    styles: dict[str, str] = {}  # theme variable -> Rich colour

    prefix_width = 0  # compact lines: this many leading columns are the dim gutter

    def highlight(self, text: Text) -> None:
        for pattern, colour, extra in self.RULES:
            style = " ".join(p for p in (extra, self.styles.get(colour, "")) if p)
            if style:
                text.highlight_regex(pattern, style)
        if self.prefix_width and len(text) > self.prefix_width and text.plain[2:3] == ":":
            text.stylize("dim", 0, self.prefix_width)


# `(APIServer pid=12204) INFO 12-01 07:41:05 [file.py:123] message`: at 80 columns only this prefix
# fitted. Compact lines keep the time and a short process name in a dim 13-column gutter, and the
# level only when it is not INFO/DEBUG.
_PREFIX = (r"^(?:\((?P<proc>[A-Za-z_]+)(?:[-_ ]?(?P<rank>\w+))?\s+pid=\d+\)\s+)?"
           r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+(?P<time>\d\d:\d\d:\d\d)"
           r"(?:\.\d+)?\s+\[[^\]]*\]\s?")
_UVICORN = r"^(?:\((?P<proc>[A-Za-z_]+)[^)]*\)\s+)?INFO:\s+"
PREFIX_W = 13
_SHORT = {"APIServer": "API", "EngineCore": "Eng", "Worker": "Wkr", "VllmWorker": "Wkr"}


def _short(proc: str | None) -> str:
    if not proc:
        return ""
    for name, short in _SHORT.items():
        if proc.startswith(name):
            return short
    return proc[:3]


def compact(line: str) -> str:
    """The line with its vLLM prefix folded into the gutter: `07:41:05 API message`."""
    m = re.match(_PREFIX, line)
    if m:
        level = m.group("level")
        rest = line[m.end():]
        if level not in ("INFO", "DEBUG"):
            rest = f"{level} {rest}"
        return f"{m.group('time')} {_short(m.group('proc')):<4}"[:PREFIX_W].ljust(PREFIX_W) + rest
    m = re.match(_UVICORN, line)
    if m:
        return f"{'':8} {_short(m.group('proc')):<4}".ljust(PREFIX_W) + line[m.end():]
    return line


def is_noise(line: str) -> bool:
    return bool(re.search(_POLL_NOISE, line))


LEVELS = ("all", "warning", "error")
_RANK = {"DEBUG": 0, "INFO": 0, "WARNING": 1, "ERROR": 2, "CRITICAL": 2}
# a line without vLLM's prefix: a traceback's lines, an exception, a bare ERROR/WARNING word
_BARE_ERR = r"\b(ERROR|CRITICAL)\b|^Traceback|^\s*File \"|^\S*(Error|Exception)\b"
_BARE_WARN = r"\bWARNING\b"


def line_level(line: str) -> int:
    """0 info, 1 warning, 2 error. A line with vLLM's prefix has the level it says (a WARNING that
    names a ValueError is a warning); only lines without one are judged by their words."""
    m = re.match(_PREFIX, line)
    if m:
        return _RANK[m.group("level")]
    if re.match(_UVICORN, line):
        return 0
    return 2 if re.search(_BARE_ERR, line) else 1 if re.search(_BARE_WARN, line) else 0


def keep_line(line: str, level: str, search: str) -> bool:
    """Whether a line is shown under a level filter and a search (case-insensitive substring)."""
    if level != "all" and line_level(line) < LEVELS.index(level):
        return False
    return not search or search.lower() in line.lower()


class LogPane(Log):
    DEFAULT_CSS = """
    LogPane { height: 1fr; }
    """
    # the scroll keys work as in any Textual view but stay out of `?`'s list, which puts the focused
    # widget's keys first: at 80x24 eight "Scroll …" rows pushed the console's own keys off the
    # screen. ← and → stay listed: the pane's border says "→ more to the right"
    BINDINGS: ClassVar[list[BindingType]] = [
        b if b.key in ("left", "right") else replace(b, system=True)
        for b in ScrollableContainer.BINDINGS if isinstance(b, Binding)]
    highlighter: VllmHighlighter  # Log's, narrowed: its styles and prefix width are set here

    def __init__(self, max_lines: int = 20000, **kwargs: Any) -> None:
        super().__init__(max_lines=max_lines, highlight=True, **kwargs)
        self.highlighter = VllmHighlighter()
        self.border_title = "vLLM log"
        self.hidden_polls = 0
        self.all_lines: deque[str] = deque(maxlen=max_lines)
        self.level = "all"
        self.search = ""
        self.compact = True  # `v` toggles the full vLLM prefix
        self.placeholder = False  # the pane shows the "no lines ..." note, not log lines
        self.highlighter.prefix_width = PREFIX_W

    def on_mount(self) -> None:
        self.watch(self, "virtual_size", lambda _size: self.show_scroll_hint(), init=False)
        self.watch(self, "scroll_x", lambda _x: self.show_scroll_hint(), init=False)
        self.use_theme()
        self.watch(self.app, "theme", self._theme_changed, init=False)

    def _theme_changed(self) -> None:
        self.call_after_refresh(self.use_theme)

    def on_resize(self) -> None:
        self.show_scroll_hint()

    def show_scroll_hint(self) -> None:
        """Say on the border when lines go on past the right edge (→ scrolls), or how far it is scrolled."""
        wider = self.virtual_size.width > self.scrollable_content_region.width
        x = round(self.scroll_x)
        hint = (f"← column {x + 1} →" if x else "→ more to the right") if wider else ""
        if self.border_subtitle != hint:
            self.border_subtitle = hint

    def use_theme(self) -> None:
        from tui.palette import colour  # start-up: loaded on first use, not before the console's first frame

        self.highlighter.styles = {name: colour(self.app, name) for name in ("error", "warning", "secondary")}
        self.set_view()

    def _shown(self, lines: Iterable[str]) -> list[str]:
        return [compact(ln) for ln in lines] if self.compact else list(lines)

    def toggle_prefix(self) -> None:
        self.compact = not self.compact
        self.highlighter.prefix_width = PREFIX_W if self.compact else 0
        self.set_view()

    def append_lines(self, lines: list[str]) -> None:
        keep = [ln for ln in lines if not is_noise(ln)]
        self.hidden_polls += len(lines) - len(keep)
        self.all_lines.extend(keep)
        shown = [ln for ln in keep if keep_line(ln, self.level, self.search)]
        if shown:
            if self.placeholder:  # the first line the filter lets through replaces the note
                self.placeholder = False
                self.clear()
            self.write_lines(self._shown(shown))

    def reset(self) -> None:
        self.all_lines.clear()
        self.set_view()  # an empty pane, or the filter's note

    def set_view(self, level: str | None = None, search: str | None = None) -> None:
        """Re-filter what is kept (the full log stays on disk; `qwen-tui logs`)."""
        self.level = level if level is not None else self.level
        self.search = search if search is not None else self.search
        self.clear()
        shown = self._shown(ln for ln in self.all_lines if keep_line(ln, self.level, self.search))
        filters = [f"level ≥ {self.level}"] if self.level != "all" else []
        filters += [f"search {self.search!r}"] if self.search else []
        # a filter that hides everything says so, rather than leaving an empty pane that looks broken
        self.placeholder = bool(filters) and not shown
        if self.placeholder:
            what = " and ".join(([f"at {self.level} or above"] if self.level != "all" else [])
                                + ([f"matching {self.search!r}"] if self.search else []))
            shown = [f"no lines {what} (of {len(self.all_lines):,} lines kept); l: next level, esc: clear filters"]
        self.write_lines(shown)
        self.border_title = escape("vLLM log" + "".join(f" · {f}" for f in filters))
