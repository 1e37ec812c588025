"""Copy text both ways a console can: OSC 52 (Textual's copy_to_clipboard), which reaches the
terminal of the user's own machine through SSH, and pyperclip, which reaches a clipboard on this
machine when it has one (a desktop session; a headless box has none and pyperclip raises there)."""

from __future__ import annotations

from typing import Any


def copy(app: Any, text: str) -> str:
    """Copy `text`; return how it went out, for the notification."""
    app.copy_to_clipboard(text)
    how = "OSC 52 (in tmux: set -g set-clipboard on)"
    try:
        import pyperclip  # start-up: loaded on the first copy; it may be missing or have no clipboard

        pyperclip.copy(text)
        how += " and this machine's clipboard"
    except Exception:  # noqa: BLE001 - no local clipboard (headless, no xclip): OSC 52 still went out
        pass
    return how
