"""Copying text out of the console, honestly.

Two paths: OSC 52 (the console writes an escape sequence; the user's own terminal puts the text
on its clipboard, over SSH too, if it allows that; nothing comes back to confirm it) and the local
clipboard through pyperclip (only where one exists: a desktop session on this machine, not over
SSH; confirmed by reading it back). When neither can be confirmed the text is also saved as a
file, so it is never lost. The OSC 52 half is the UI's (App.copy_to_clipboard); this module does
the rest and says what happened.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from backend import paths

KEEP_CLIPS = 20
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


@dataclass
class CodeBlock:
    lang: str
    code: str

    def describe(self) -> str:
        lines = self.code.count("\n") + (1 if self.code and not self.code.endswith("\n") else 0)
        return f"{self.lang or 'code'}, {lines} line{'s' if lines != 1 else ''}"


def code_blocks(markdown: str) -> list[CodeBlock]:
    """The fenced code blocks of a Markdown text, in order (an unclosed last fence runs to the end)."""
    out: list[CodeBlock] = []
    fence, lang = "", ""
    body: list[str] = []
    for line in markdown.splitlines(keepends=True):
        m = _FENCE.match(line.rstrip("\n"))
        if not fence and m:
            fence, lang, body = m.group(1), m.group(2).strip().split(" ")[0], []
        elif fence and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
            out.append(CodeBlock(lang, "".join(body)))
            fence = ""
        elif fence:
            body.append(line)
    if fence and body:
        out.append(CodeBlock(lang, "".join(body)))
    return out


def local_clipboard_missing() -> str | None:
    """Why this machine's clipboard is not the user's (None: there is one to try)."""
    if os.environ.get("SSH_CONNECTION") or os.environ.get("SSH_TTY"):
        return "an SSH session: this machine's clipboard is not yours"
    if sys.platform in ("darwin", "win32"):
        return None
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return "no desktop session here (no DISPLAY or WAYLAND_DISPLAY)"
    return None


def copy_local(text: str) -> str | None:
    """Put `text` on the local clipboard with pyperclip and read it back; None when confirmed,
    else why not. Blocking (pyperclip runs xclip, wl-copy or pbcopy): call it from a thread."""
    try:
        import pyperclip  # start-up: loaded on first use, not with the console

        pyperclip.copy(text)
        if pyperclip.paste() != text:
            return "the local clipboard did not hold the text afterwards"
    except Exception as e:  # noqa: BLE001 - PyperclipException and whatever the helper program does
        return f"pyperclip: {e}".splitlines()[0][:160]
    return None


def save_clip(text: str, kind: str = "reply", root: Path | None = None) -> Path:
    """Write the text to `<state dir>/clips/<kind>-<time>.txt` (0600), keeping the last KEEP_CLIPS."""
    root = root or paths.state_dir() / "clips"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    suffix = ".md" if kind == "reply" else ".txt"
    path = root / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 1000:03d}{suffix}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    for old in sorted(root.iterdir(), key=lambda p: p.stat().st_mtime)[:-KEEP_CLIPS]:
        old.unlink(missing_ok=True)
    return path


@dataclass
class Delivery:
    chars: int
    local: bool  # the local clipboard holds it (read back)
    why_not_local: str = ""
    file: Path | None = None
    file_error: str = ""

    def text(self, what: str) -> str:
        head = f"copied {what} ({self.chars} characters): OSC 52 sent to your terminal"
        if self.local:
            return head + " and this machine's clipboard (pyperclip, read back)"
        out = (head + " (your terminal cannot confirm it; in tmux: set -g set-clipboard on); "
               f"no local clipboard: {self.why_not_local}")
        if self.file:
            out += f"; also saved as {self.file}"
        elif self.file_error:
            out += f"; could not save it as a file: {self.file_error}"
        return out


def deliver(text: str, kind: str = "reply") -> Delivery:
    """After OSC 52 went out: the local clipboard where there is one, else a file. Blocking."""
    why = local_clipboard_missing()
    if why is None:
        why = copy_local(text)
        if why is None:
            return Delivery(len(text), True)
    out = Delivery(len(text), False, why)
    try:
        out.file = save_clip(text, kind)
    except OSError as e:
        out.file_error = e.strerror or str(e)
    return out
