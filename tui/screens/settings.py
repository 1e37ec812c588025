"""SettingsScreen: every setting by section, edited in place and saved into the config file.

Up/down move, left/right jump between sections, enter edits the highlighted key (its TOML form), enter saves,
esc cancels the edit or closes.
Dismisses with "restart" (r: restart the server now), "saved" (something was saved) or None.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.markup import escape
from textual.suggester import SuggestFromList
from textual.widgets import Footer, Input, OptionList, Static
from textual.widgets.option_list import Option

from backend.errors import ConfigError
from backend.setting_rows import (
    Row,
    apply_edit,
    build_rows,
    config_target,
    effect,
    file_data,
    offer_restart,
    overrides_text,
    parse_text,
    toml_text,
    type_text,
)
from backend.settings import SCHEMA
from tui.messages import LedgerPreviewed, SettingSaved
from tui.palette import style
from tui.screens.dialog import Dialog

if TYPE_CHECKING:
    from backend.ledger.preview import Preview

KEY_W = max(len(k) for table in SCHEMA.values() for k in table)
VALUE_W, DEFAULT_W, NARROW_VALUE_W = 26, 14, 16
NARROW_KEY_W = 22  # narrow: a longer key is cut (the detail pane names it whole)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# a row is marker, key, value, source, default, then the help; below this width the default column
# goes (the detail pane under the list names it), so the help is not cut to nothing (80 columns: ~70)
WIDE_AT = 2 + KEY_W + 1 + VALUE_W + 1 + 7 + 8 + DEFAULT_W + 1 + 24


def _prompt(row: Row, app: App[Any] | None = None, width: int | None = None, key_w: int = KEY_W) -> Text:
    """One row; key_w is its section's key column (the widest key of the whole schema by default)."""
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("● " if row.modified else "  ", style(app, "warning", "bold"))
    wide = width is None or width >= WIDE_AT
    value_w = VALUE_W if wide else NARROW_VALUE_W  # narrow: a long value is whole in the detail pane
    key_w = key_w if wide else min(key_w, NARROW_KEY_W)
    text.append(f"{_clip(row.key, key_w):<{key_w}} ", "bold")
    text.append(f"{_clip(row.value_text, value_w):<{value_w}} ")
    text.append(f"{row.source if row.forced else '':<7}", style(app, "secondary"))
    if wide:
        text.append(f"default {_clip(row.default_text, DEFAULT_W):<{DEFAULT_W}} ", "dim")
    text.append(row.spec.help, "italic")
    if row.choices_text:
        text.append(f"  ({row.choices_text})", "dim")
    return text


def _detail(row: Row, app: App[Any] | None = None) -> Text:
    text = Text()
    text.append(row.dotted, "bold")
    text.append(f" — {row.spec.help}\n")
    text.append(f"value {row.value_text}", "bold")
    text.append(f"  ({row.source_text})")
    if row.forced:
        text.append(f"  · in the file: {row.file_text}")
    default = row.default_text if row.default is not None else "not set: vLLM's own default applies"
    text.append(f"\ndefault {default} · {type_text(row.spec)}")
    if row.choices_text:
        text.append(f" · one of {row.choices_text}")
    text.append(f"\nused {effect(row.section, row.key)}", style(app, "warning") if row.restart else "dim")
    return text


class SettingsScreen(Dialog[str | None]):
    CSS_PATH = "settings.tcss"
    BINDINGS = [
        Binding("escape", "back", "Cancel edit / close", id="close"),
        # priority: the list would take left/right to scroll sideways (disabled while editing)
        Binding("right", "section(1)", "Next section", id="next-section", key_display="→", priority=True),
        Binding("left", "section(-1)", "Previous section", id="previous-section", key_display="←",
                priority=True),
        Binding("enter", "edit", "Edit", id="edit", priority=True),
        Binding("r", "restart_server", "Restart server now", id="restart"),
    ]

    def __init__(self, server_state: Callable[[], str | None] | None = None) -> None:
        super().__init__()
        self.server_state = server_state or (lambda: None)
        self.rows: dict[str, Row] = {}
        self.editing: Row | None = None
        self.saving = False
        self.saved_any = False
        self.restart_pending = False
        self.last_preview: Preview | None = None  # the newest shown
        self._wide = True  # the rows carry the default column (WIDE_AT)
        self._plan_inputs: tuple[list[dict[str, Any]] | None, str | None] | None = None  # GPUs, vLLM version (once)

    def compose_body(self) -> ComposeResult:  # no keys line: the Footer below the dialog has them
        yield Static(id="target")
        yield OptionList(id="rows")
        yield Static(id="detail")
        yield Input(id="editor")
        yield Static(id="preview")
        yield Static(id="message")

    def compose(self) -> ComposeResult:
        yield from super().compose()
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = "settings"
        self.show_rows()
        self.query_one(OptionList).focus()

    # -- rows ----------------------------------------------------------------------------------
    def show_rows(self, keep: str | None = None) -> None:
        settings = self.app.settings
        path = config_target(settings)
        try:
            data, problem = file_data(path), None
        except ConfigError as e:
            data, problem = {}, str(e)
        rows = build_rows(settings, data)
        self.rows = {r.dotted: r for r in rows}
        head = Text()
        head.append("saves to ", "dim")
        head.append(str(path), "bold")
        if not path.exists():  # in --demo, the overrides line below says whose file it is
            head.append(" (created on the first save)", "dim")
        for line in overrides_text(settings):
            head.append(f"\n{line}", style(self.app, "secondary"))
        self.query_one("#target", Static).update(head)
        if problem:
            self.show_message(f"cannot read the file: {problem}", "error")
        options: list[Option] = []
        width = self.rows_width()
        self._wide = width >= WIDE_AT
        for section in SCHEMA:
            options.append(Option(Text(f"[{section}]", "bold"), id=f"section:{section}", disabled=True))
            mine = [r for r in rows if r.section == section]
            key_w = KEY_W if self._wide else max((len(r.key) for r in mine), default=1)  # narrow: this section's
            options += [Option(_prompt(r, self.app, width, key_w), id=r.dotted) for r in mine]
        box = self.query_one(OptionList)
        old = box.highlighted
        box.set_options(options)
        if keep in self.rows:
            box.highlighted = box.get_option_index(keep)
        else:
            box.highlighted = old if old is not None and not options[old].disabled else 1

    def rows_width(self) -> int:
        """The list's width for its rows; before the first layout, the dialog's share of the terminal."""
        width = self.query_one(OptionList).scrollable_content_region.width
        return width if width > 0 else int(self.app.size.width * 0.96) - 6

    def on_resize(self) -> None:
        if self.rows and (self.rows_width() >= WIDE_AT) != self._wide:  # the default column comes or goes
            box = self.query_one(OptionList)
            highlighted = box.highlighted
            keep = box.get_option_at_index(highlighted).id if highlighted is not None else None
            self.show_rows(keep=keep)

    @on(OptionList.OptionHighlighted, "#rows")
    def row_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        row = self.rows.get(event.option.id or "")
        if row is not None:
            self.query_one("#detail", Static).update(_detail(row, self.app))

    @on(OptionList.OptionSelected, "#rows")
    def row_selected(self, event: OptionList.OptionSelected) -> None:
        row = self.rows.get(event.option.id or "")
        if row is not None:
            self.start_edit(row)

    # -- editing -------------------------------------------------------------------------------
    def start_edit(self, row: Row) -> None:
        self.editing = row
        editor = self.query_one("#editor", Input)
        choices = [toml_text(c) for c in row.spec.choices or ()]
        if row.spec.type is bool:
            choices = ["true", "false"]
        editor.suggester = SuggestFromList(choices) if choices else None
        editor.value = row.edit_text
        editor.password = row.secret  # a key is typed masked and never shown back
        editor.cursor_position = len(editor.value)
        editor.placeholder = ("type a new key (prefer server.api_key_file); empty: remove it" if row.secret else
                              "empty: remove the key from the file (its default applies)")
        self.add_class("-editing")
        editor.focus()
        self.refresh_bindings()
        hint = f"editing {row.dotted}: enter saves to {config_target(self.app.settings)}, esc cancels"
        if row.forced:
            hint += f" · this run keeps its {row.source} value"
        if choices:
            hint += f" · one of {' | '.join(choices)}"
        self.show_message(hint)
        self.query_one("#preview", Static).update("")
        self._preview(editor.value)

    # -- the ledger's preview of the value being typed ---------------------------------------------
    @on(Input.Changed, "#editor")
    def editor_changed(self, event: Input.Changed) -> None:
        self._preview(event.value)

    def _preview(self, text: str) -> None:
        from backend.ledger.preview import reads  # start-up: loaded on first use, not before the console's first frame

        row = self.editing
        if row is None or row.secret or not reads(row.section, row.key):
            self.remove_class("-previewing")
            return
        self.add_class("-previewing")
        self.run_preview(row.section, row.key, text)

    @work(group="settings-preview", exclusive=True, exit_on_error=False, thread=True)
    def run_preview(self, section: str, key: str, text: str) -> None:
        """The ledger with the typed value (pure, a few ms; the GPUs and vLLM version read once)."""
        # start-up: loaded on first use, not before the console's first frame
        from backend.ledger.preview import preview

        if self._plan_inputs is None:
            # start-up: loaded on first use, not before the console's first frame
            from backend.ledger.adapter import gpus_from_monitor
            from backend.ledger.cli import detect_vllm_version

            try:
                gpus = gpus_from_monitor(self.app.gpus, with_free=False)
            except Exception:  # noqa: BLE001 - plan from the planner's card
                gpus = None
            self._plan_inputs = (gpus, detect_vllm_version(self.app.settings))
        gpus, version = self._plan_inputs
        self.post_message(LedgerPreviewed(preview(self.app.settings, section, key, text, gpus, version), text))

    @on(LedgerPreviewed)
    def show_preview(self, message: LedgerPreviewed) -> None:
        p = message.preview
        row = self.editing
        if row is None or p.dotted != row.dotted or message.typed != self.query_one("#editor", Input).value:
            return  # an older keystroke's answer
        self.last_preview = p
        box = self.query_one("#preview", Static)
        box.set_classes("-fail" if (p.invalid or p.no_plan or not p.fits) else "-fits")
        box.update(Text("\n".join(p.lines())))

    def stop_edit(self) -> None:
        self.editing = None
        self.remove_class("-editing")
        self.query_one(OptionList).focus()
        self.refresh_bindings()

    @on(Input.Submitted, "#editor")
    def edit_submitted(self, event: Input.Submitted) -> None:
        row = self.editing
        if row is None or self.saving:
            return
        try:
            parse_text(row.section, row.key, event.value)
        except ConfigError as e:  # checked here too, so a bad value is answered at once
            self.show_message(str(e), "error")
            return
        self.saving = True
        self.show_message(f"saving {row.dotted}…")
        self.save(row.section, row.key, event.value)

    @work(group="settings-save", exclusive=True, exit_on_error=False)
    async def save(self, section: str, key: str, text: str) -> None:
        try:
            saved = await asyncio.to_thread(apply_edit, self.app.settings, section, key, text)
        except ConfigError as e:
            self.post_message(SettingSaved(error=str(e)))
        except Exception as e:  # a disk error must not close the console
            self.post_message(SettingSaved(error=f"not saved: {type(e).__name__}: {e}"))
        else:
            self.post_message(SettingSaved(saved))

    @on(SettingSaved)
    def setting_saved(self, message: SettingSaved) -> None:
        self.saving = False
        saved = message.saved
        if message.error or saved is None:
            self.show_message(message.error or "not saved", "error")
            return
        fails = self.last_preview if (self.last_preview is not None and self.last_preview.dotted == saved.dotted
                                      and self.last_preview.errors) else None
        self.last_preview = None
        self.app.reload_settings(saved.settings)
        self.saved_any = True
        self.stop_edit()
        self.show_rows(keep=saved.dotted)
        if offer_restart(saved, self.server_state()):
            self.restart_pending = True
            self.show_message(f"{saved.note}\nThe server is running: this takes effect when it restarts. "
                              "Press r to restart it now, or esc to leave it running as it is.", "restart")
        elif self.restart_pending:
            self.show_message(f"{saved.note}\nr restarts the server with the earlier changes.", "restart")
        else:
            self.show_message(saved.note, "saved")
        if fails is not None:  # said before the restart, not after a slow failed launch
            self.show_message(f"{saved.note}\nThe ledger says a start with this would fail: "
                              f"{fails.errors[0]['message']}\n  fix: {fails.errors[0]['fix']}", "error")
        self.refresh_bindings()

    def show_message(self, text: str, kind: str = "") -> None:
        box = self.query_one("#message", Static)
        box.set_classes(f"-{kind}" if kind else "")
        box.update(escape(text))

    # -- keys ----------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "restart_server":
            return self.restart_pending and self.editing is None
        if action in ("section", "edit"):
            return self.editing is None
        return True

    def action_back(self) -> None:
        if self.editing is not None:
            name = self.editing.dotted
            self.stop_edit()
            self.show_message(f"{name}: edit cancelled, nothing saved")
            return
        self.dismiss("saved" if self.saved_any else None)

    def action_edit(self) -> None:
        """Enter on a row: the list selects it, which opens the editor (row_selected)."""
        self.query_one(OptionList).action_select()

    def action_section(self, step: int) -> None:
        """Highlight the first key of the next (step 1) or previous (step -1) section."""
        box = self.query_one(OptionList)
        starts = [i + 1 for i, o in enumerate(box.options) if o.disabled]
        here = box.highlighted or 0
        current = max((i for i in starts if i <= here), default=starts[0])
        box.highlighted = starts[(starts.index(current) + step) % len(starts)]

    def action_restart_server(self) -> None:
        self.dismiss("restart")
