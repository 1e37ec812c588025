"""ChatSettingsScreen: this conversation's system prompt, temperature, top_p and max_tokens (the
defaults of a new one come from [chat]); saved with the conversation. Dismisses with the new
ChatParams, or None (esc)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Label

from backend.chat.conversation import PARAM_HELP, ChatParams, parse_param
from backend.settings.spec import CHAT
from tui.screens.dialog import Dialog


class ChatSettingsScreen(Dialog[ChatParams | None]):
    CSS_PATH = "chat_settings.tcss"
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="chat-settings-cancel")]
    KEYS = "enter: save with this conversation · tab: next field · esc: cancel (new conversations start from [chat])"
    AUTO_FOCUS = "#param-system_prompt"

    def __init__(self, params: ChatParams, title: str = "", start: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.params, self.title_text = params, title
        self.start = start or {}  # the [chat] settings new conversations start from (--demo's, --set's included)

    def help_text(self, name: str) -> str:
        """The key's help, and where a new chat's value comes from: this conversation's may differ
        (the demo's max_tokens 64 beside the built-in 512 read as a contradiction)."""
        built_in = CHAT[name].default
        if name == "system_prompt" or name not in self.start:
            return PARAM_HELP[name]
        now = self.start[name]
        origin = "the built-in default" if now == built_in else f"[chat]; built-in default {built_in:g}"
        return f"{PARAM_HELP[name]}; new chats start at {now:g} ({origin})"

    def heading(self) -> str:
        return f"Settings of this chat{': ' + self.title_text if self.title_text else ''}"

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="fields"):  # scrolls at 80×24, its keys line still on screen
            for f in fields(ChatParams):
                with Horizontal(classes="row"):
                    yield Label(f.name, classes="name")
                    yield Input(str(getattr(self.params, f.name)), id=f"param-{f.name}", select_on_focus=False)
                yield Label(self.help_text(f.name), classes="help", markup=False)
        yield Label("", id="detail", markup=False)

    @on(Input.Submitted)
    def save(self) -> None:
        values, errors = {}, []
        for f in fields(ChatParams):
            raw = self.query_one(f"#param-{f.name}", Input).value
            try:
                values[f.name] = parse_param(f.name, raw)
            except ValueError as e:
                errors.append(str(e))
        if errors:
            self.query_one("#detail", Label).update("not saved: " + "; ".join(errors))
            return
        self.dismiss(ChatParams(**values))
