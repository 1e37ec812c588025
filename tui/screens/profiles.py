"""ProfileScreen: the workload profiles (key p), each with the ledger's verdict on this box (fits?,
KV tokens, max concurrency at its max_model_len, what it warns), computed at once, no launch.
`enter` picks the highlighted one (MainScreen asks before restarting a running server with it),
`esc` closes. Dismisses with the profile's name, "" for none (the file's [server] as it is), or None."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from tui.lazy import load
from tui.messages import ProfilesPlanned
from tui.palette import style
from tui.screens.dialog import Dialog

if TYPE_CHECKING:
    from backend.profiles import Verdict

NONE_ID = "profile:"  # no profile: [server] as the file has it


def verdict_text(v: Verdict, app: App[Any] | None = None, current: bool = False) -> Text:
    """Two or more lines: name and overlay, then the verdict; warnings and errors below."""
    from backend.profiles import overlay_text  # start-up: loaded on first use, not before the console's first frame

    text = Text()
    text.append("● " if current else "  ", style(app, "accent", "bold"))
    text.append(f"{v.name:<10}", "bold")
    text.append(overlay_text(v.overlay), "")
    if v.description:
        text.append(f"  {v.description}", "italic dim")
    text.append("\n    ")
    if v.error:
        text.append(f"no plan: {v.error}", style(app, "error"))
        return text
    text.append("fits" if v.fits else "does NOT fit", style(app, "success" if v.fits else "error", "bold"))
    from backend.ledger.preview import longest_len_text  # start-up: loaded on first use

    kv = f"{v.kv_cache_tokens:,}" if v.kv_cache_tokens is not None else "?"
    conc = f"{v.max_concurrency:.2f}x" if v.max_concurrency is not None else "?"
    at = f"{v.max_model_len:,}" if v.max_model_len is not None else "?"
    text.append(f" · KV {kv} tokens · max concurrency {conc} at {at} tokens · max_num_seqs "
                f"{v.max_num_seqs if v.max_num_seqs is not None else '?'} · "
                + longest_len_text(v.max_model_len_that_fits, v.kv_cache_tokens))
    for p in v.problems[:3]:
        colour = "error" if p["severity"] == "error" else "warning"
        text.append(f"\n    {'✗' if colour == 'error' else '⚠'} {p['message']}", style(app, colour))
        if p["severity"] == "error":
            text.append(f"\n      fix: {p['fix']}", "dim")
    return text


class ProfileScreen(Dialog[str | None]):
    CSS_PATH = "profiles.tcss"
    BINDINGS = [Binding("escape", "dismiss(None)", "Close", id="close")]
    KEYS = "enter: use the highlighted profile (a running server restarts with it, after a question)   esc: close"

    def __init__(self, running_profile: str | None = None, running: bool = False) -> None:
        super().__init__()
        self.running_profile, self.running = running_profile, running
        self.verdicts: list[Verdict] = []

    def compose_body(self) -> ComposeResult:
        yield Label("planning every profile…", id="summary")
        yield OptionList(id="profiles")

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = "workload profiles"
        self.query_one(OptionList).focus()
        self.plan_all()

    @work(group="profiles", exclusive=True, exit_on_error=False, thread=True)
    def plan_all(self) -> None:
        # start-up: first use; one importing thread at a time (tui/lazy.py), then the imports below are lookups
        load("backend.ledger", "backend.ledger.adapter", "backend.ledger.cli", "backend.profiles")
        # loaded above: these are lookups
        from backend.ledger.adapter import gpus_from_monitor
        from backend.ledger.cli import detect_vllm_version
        from backend.profiles import verdicts

        try:
            try:
                gpus = gpus_from_monitor(self.app.gpus, with_free=False)
            except Exception:  # noqa: BLE001 - plan from the planner's card
                gpus = None
            settings = self.app.settings
            self.post_message(ProfilesPlanned(verdicts(settings, gpus, detect_vllm_version(settings))))
        except Exception as e:  # noqa: BLE001 - say it, never close the console
            self.post_message(ProfilesPlanned([], error=f"{type(e).__name__}: {e}"))

    @on(ProfilesPlanned)
    def planned(self, message: ProfilesPlanned) -> None:
        summary = self.query_one("#summary", Label)
        if message.error:
            summary.update(Text(f"no plan: {message.error}", style(self.app, "error")))
            return
        self.verdicts = message.verdicts
        active = self.app.settings.profile
        where = "the server runs" if self.running else "the next start uses"
        shown = self.running_profile if self.running else active
        demo = bool(getattr(self.app.settings, "demo", False))
        base = "the demo's [server]" if demo else "[server] as in the file"
        sized = " · demo-sized profiles (--demo)" if demo else ""
        summary.update(Text(f"{where}: {f'profile {shown}' if shown else f'no profile ({base})'}{sized}"
                            " · the ledger's verdict for each on this box, before any launch"))
        box = self.query_one(OptionList)
        none = "[server] as the demo has it" if demo else "[server] as the config file has it"
        options = [Option(Text(f"{'● ' if not active else '  '}(none)    {none}", "bold"), id=NONE_ID)]
        options += [Option(verdict_text(v, self.app, v.name == active), id=f"profile:{v.name}")
                    for v in message.verdicts]
        box.set_options(options)
        box.highlighted = next((i for i, o in enumerate(options) if o.id == f"profile:{active or ''}"), 0)

    @on(OptionList.OptionSelected, "#profiles")
    def chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss((event.option.id or NONE_ID)[len("profile:"):])
