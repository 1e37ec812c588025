"""LogPane: the live server log, bounded, with ERROR/WARNING highlighted and poll noise hidden."""

from __future__ import annotations

import re

from rich.highlighter import Highlighter
from rich.text import Text
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


class LogPane(Log):
    DEFAULT_CSS = """
    LogPane { border: round $primary-darken-2; }
    """

    def __init__(self, max_lines: int = 20000, **kwargs) -> None:
        super().__init__(max_lines=max_lines, highlight=True, **kwargs)
        self.highlighter = VllmHighlighter()
        self.border_title = "vLLM log"
        self.hidden_polls = 0

    def append_lines(self, lines: list[str]) -> None:
        keep = [ln for ln in lines if not is_noise(ln)]
        self.hidden_polls += len(lines) - len(keep)
        if keep:
            self.write_lines(keep)
