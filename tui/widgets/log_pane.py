"""LogPane: the live server log, bounded, with ERROR/WARNING highlighted and poll noise hidden."""

from __future__ import annotations

import re
from collections import deque

from rich.highlighter import Highlighter
from rich.text import Text
from textual.markup import escape
from textual.widgets import Log

# uvicorn access lines for the console's own polls would drown the log.
_POLL_NOISE = re.compile(r'"GET /(health|metrics|v1/models) HTTP/1\.[01]" 200')


class VllmHighlighter(Highlighter):
    """Colours by regex with explicit styles (no theme lookups)."""

    RULES = [
        (re.compile(r"\b(ERROR|CRITICAL)\b.*|Traceback.*|^\S*(Error|Exception)\b.*"), "bold red"),
        (re.compile(r"\bWARNING\b"), "yellow"),
        (re.compile(r"^\((APIServer|EngineCore\w*|Worker\w*|VllmWorker[\w -]*)[^)]*\)"), "cyan"),
        (re.compile(r"\b\d[\d,]*(\.\d+)?\s*(GiB|GB|tokens|seconds|x)\b"), "bold"),
    ]

    def highlight(self, text: Text) -> None:
        for pattern, style in self.RULES:
            text.highlight_regex(pattern, style)


def is_noise(line: str) -> bool:
    return bool(_POLL_NOISE.search(line))


LEVELS = ("all", "warning", "error")
_WARN = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback|Error\b")
_ERR = re.compile(r"\b(ERROR|CRITICAL)\b|Traceback|Error\b")


def keep_line(line: str, level: str, search: str) -> bool:
    """Whether a line is shown under a level filter and a search (case-insensitive substring)."""
    if level == "warning" and not _WARN.search(line):
        return False
    if level == "error" and not _ERR.search(line):
        return False
    return not search or search.lower() in line.lower()


class LogPane(Log):
    DEFAULT_CSS = """
    LogPane { border: round $primary-darken-2; }
    """

    def __init__(self, max_lines: int = 20000, **kwargs) -> None:
        super().__init__(max_lines=max_lines, highlight=True, **kwargs)
        self.highlighter = VllmHighlighter()
        self.border_title = "vLLM log"
        self.hidden_polls = 0
        self.all_lines: deque[str] = deque(maxlen=max_lines)
        self.level = "all"
        self.search = ""

    def append_lines(self, lines: list[str]) -> None:
        keep = [ln for ln in lines if not is_noise(ln)]
        self.hidden_polls += len(lines) - len(keep)
        self.all_lines.extend(keep)
        shown = [ln for ln in keep if keep_line(ln, self.level, self.search)]
        if shown:
            self.write_lines(shown)

    def reset(self) -> None:
        self.all_lines.clear()
        self.clear()

    def set_view(self, level: str | None = None, search: str | None = None) -> None:
        """Re-filter what is kept (the full log stays on disk; `qwen-tui logs`)."""
        self.level = level if level is not None else self.level
        self.search = search if search is not None else self.search
        self.clear()
        self.write_lines([ln for ln in self.all_lines if keep_line(ln, self.level, self.search)])
        filters = [f"level ≥ {self.level}"] if self.level != "all" else []
        filters += [f"search {self.search!r}"] if self.search else []
        self.border_title = escape("vLLM log" + "".join(f" · {f}" for f in filters))
