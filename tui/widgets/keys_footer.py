"""KeysFooter: the keys that fit on one line, and `?` (every key of what has focus) always
(`f1` while a text field has focus: there `?` is a character).

Textual's Footer lays every binding out and cuts the last ones at the edge (`e Sett▏` at 120
columns). This one drops what does not fit, from the end, and keeps `? keys` at the right."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

HELP_KEY = ("?", "keys")


def fit(pairs: list[tuple[str, str]], width: int, always: tuple[str, str] = HELP_KEY) -> list[tuple[str, str]]:
    """The (key, description) pairs that fit in `width` columns, in order, with `always` last."""
    def cost(pair: tuple[str, str]) -> int:
        return len(pair[0]) + 1 + len(pair[1]) + 2

    budget = width - cost(always) - 1
    out = []
    for pair in pairs:
        if pair[1] == always[1]:
            continue
        if cost(pair) > budget:
            break
        out.append(pair)
        budget -= cost(pair)
    return out + [always]


class KeysFooter(Static):
    DEFAULT_CSS = """
    KeysFooter { dock: bottom; height: 1; background: $footer-background; color: $footer-foreground;
                 padding: 0 1; }
    """

    shown: list[tuple[str, str]] = []  # what is on screen, for tests

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, lambda _screen: self.refresh_keys())
        self.refresh_keys()

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def on_resize(self) -> None:
        self.refresh_keys()

    def refresh_keys(self) -> None:
        pairs: list[tuple[str, str]] = []
        seen = set()
        for _node, binding, enabled, _tip in self.screen.active_bindings.values():
            if not binding.show or not enabled or binding.action in seen:
                continue
            seen.add(binding.action)
            pairs.append((self.app.get_key_display(binding), binding.description.lower()))
        from textual.widgets import Input  # start-up: loaded on first use, not before the console's first frame

        if getattr(self.app, "watching", False):  # --watch: said first, whatever else fits
            pairs.insert(0, ("watch mode", "no control keys"))
        typing = isinstance(self.screen.focused, Input)  # there `?` is text: f1 shows the keys
        self.shown = fit(pairs, max(self.size.width - 2, 20), ("f1", "keys") if typing else HELP_KEY)
        key_style = self.app.theme_variables.get("footer-key-foreground", "") or "bold"
        text = Text(no_wrap=True, overflow="crop")
        for i, (key, what) in enumerate(self.shown):
            if i:
                text.append("  ")
            text.append(key, f"bold {key_style}")
            text.append(f" {what}")
        self.update(text)
