"""The main screen's start / stop / restart: confirmation, feedback while they run, one queued key.

A mixin of MainScreen (kept apart so each module stays small). Blocking calls run in threads;
results come back as messages (tui.messages) and only the handlers touch widgets.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from textual import work

from backend.server.status import SUPERVISED, ServerState
from tui.messages import ActionFinished, OrphansScanned

if TYPE_CHECKING:
    from textual.screen import Screen
    from textual.worker import Worker

    from backend.server.status import ServerStatus
    from tui.node import QwenNode
    from tui.widgets.failure_banner import FailureBanner

    class MainScreenParts(QwenNode, Screen[None]):
        """What the main screen's mixins (this one, fix_actions.py, main_dialogs.py) use of MainScreen, for mypy."""

        state: ServerStatus
        plan: dict[str, Any] | None
        restart_after_plan: bool

        def action_settings(self) -> None: ...
        def compute_plan(self) -> Worker[None]: ...
        def apply_worker(self, prop: Any) -> Worker[None]: ...
        def shown_profile(self) -> str | None: ...
        def _show_status(self) -> None: ...
        def _run_action(self, action: str, exposure_ok: bool = False) -> None: ...
        def failure_banner(self, make: bool = False) -> FailureBanner | None: ...
else:
    MainScreenParts = object  # at run time the mixins are plain classes, MainScreen the Screen

# what is under way, in words, for the status line (with the seconds since it began)
PENDING = {
    "stop": "stopping: waiting for the server to exit…",
    "restart": "restarting: waiting for the old server to exit…",
    "scan": "starting: looking for processes that hold the GPUs…",
    "start": "starting: launching the supervisor…",
}


def needs_confirm(policy: str, state: ServerState) -> bool:
    """console.confirm: "running" asks when the server is READY (serving, or able to serve,
    requests); "always" whenever there is a server to stop; "never" never."""
    if policy == "never":
        return False
    if policy == "always":
        return state in SUPERVISED
    return state == ServerState.READY


class ServerActions(MainScreenParts):
    """Expects: self.app (QwenApp), self.state (the last poll's status), self.plan (MainScreenParts)."""

    busy = False
    busy_action: str | None = None
    busy_phase: str | None = None
    busy_since: float = 0.0
    queued: str | None = None

    def pending_text(self) -> str:
        if not self.busy or not self.busy_phase:
            return ""
        text = PENDING.get(self.busy_phase, f"{self.busy_phase}…")
        text += f" {time.monotonic() - self.busy_since:.0f} s"
        if self.queued:
            text += f" · then {self.queued}"
        return text

    def _set_phase(self, phase: str | None) -> None:
        self.busy_phase = phase
        self.busy_since = time.monotonic()
        self._show_pending()

    def _show_pending(self) -> None:  # MainScreen redraws the status line
        pass

    # -- keys ----------------------------------------------------------------------------------
    def action_start(self) -> None:
        self._request("start")

    def action_stop(self) -> None:
        self._request("stop")

    def action_restart(self) -> None:
        self._request("restart")

    def _request(self, action: str) -> None:
        if self.busy:
            # x then s: the start follows the stop; s then x (STARTING on screen before the start call returned):
            # the stop follows the start. Not a refusal: the key a user pressed is never lost.
            follows = {"start": ("stop",), "stop": ("start", "restart")}
            if self.busy_action in follows.get(action, ()) and self.queued is None:
                self.queued = action
                self.notify(f"{action} queued: it follows the {self.busy_action}")
                self._show_pending()
            else:
                self.notify(f"busy: {self.pending_text() or self.busy_action}", severity="warning")
            return
        state = self.state.state
        policy = self.app.settings.console_cfg.confirm
        if action != "start" and needs_confirm(policy, state):
            # start-up: loaded on first use, not before the console's first frame
            from tui.screens.confirm import ConfirmScreen

            running = getattr(self, "requests_running", None)
            detail = (f"It is {state.upper()}" + (f", {running} requests running" if running else "")
                      + f". (console.confirm = \"{policy}\"; \"never\" stops asking)")
            question = "Stop the server?" if action == "stop" else "Restart the server?"

            def chosen(yes: bool | None) -> None:
                if yes:
                    self._run_action(action)
                else:
                    self.notify(f"{action}: cancelled")

            self.app.push_screen(ConfirmScreen(question, detail), chosen)
            return
        self._run_action(action)

    def _run_action(self, action: str, exposure_ok: bool = False) -> None:
        if self.busy:
            self.notify(f"busy: {self.pending_text() or self.busy_action}", severity="warning")
            return
        from backend import apikey  # start-up: loaded on first use, not before the console's first frame
        from tui.screens.exposure import ExposureScreen
        from tui.screens.preflight import blocking

        exposed = apikey.exposure(self.app.settings) if action in ("start", "restart") else None
        if exposed and not exposure_ok:  # a network bind without a key: one key to go on
            self.app.push_screen(ExposureScreen(exposed),
                                 lambda ok: self._run_action(action, exposure_ok=True) if ok else None)
            return

        problems = blocking(self.plan) if action in ("start", "restart") else []
        if problems:  # a slow launch that the ledger says will fail: say so first, with its fix
            self.preflight_worker(action, problems)
            return
        self._go(action)

    @work(group="preflight", exclusive=True, exit_on_error=False)
    async def preflight_worker(self, action: str, problems: list[dict[str, Any]]) -> None:
        from backend import fixes  # start-up: loaded on first use, not before the console's first frame
        from tui.screens.preflight import PreflightScreen

        prop = await asyncio.to_thread(fixes.propose_for_plan, self.plan, self.app.settings)

        def chosen(choice: str | None) -> None:
            if choice == "fix" and prop is not None:
                self.apply_worker(prop)  # saved, then restarted on the fixed settings' plan (FixActions)
            elif choice == "force":
                self._go(action)
            elif choice == "settings":
                self.action_settings()

        self.app.push_screen(PreflightScreen(problems, prop.to_dict() if prop else None), chosen)

    def _go(self, action: str) -> None:
        if action in ("start", "restart"):
            # start-up: loaded on first use, not before the console's first frame
            from backend.pull.run import not_downloaded

            note = not_downloaded(self.app.settings)  # a repo id vLLM would fetch itself, slowly and silently
            if note:
                self.notify(note, severity="warning", timeout=8)
        self.busy, self.busy_action = True, action
        self._set_phase("scan" if action == "start" else action)
        self.notify(f"{action}…", timeout=2)
        self.run_action_worker(action)

    @work(group="action", exclusive=True, exit_on_error=False)
    async def run_action_worker(self, action: str) -> None:
        """stop runs at once; start and restart first look for orphans. A restart asks every
        question and runs every check while the old server still runs: only then is it stopped."""
        client = self.app.client
        try:
            if action == "stop":
                self.post_message(ActionFinished(action, await asyncio.to_thread(client.stop)))
                return
            if action == "restart":
                # start-up: loaded on first use, not before the console's first frame
                from backend.server.launch import build_launch

                problems = (await asyncio.to_thread(build_launch, self.app.settings)).problems
                if problems:
                    self.post_message(ActionFinished(action, "not restarted, the old server keeps running: "
                                                     + "; ".join(problems), error=True))
                    return
            scan = await asyncio.to_thread(client.scan_orphans, self.app.settings.env, self.app.gpus)
            self.post_message(OrphansScanned(scan, "", restart=action == "restart"))
        except Exception as e:
            self.post_message(ActionFinished(action, str(e), error=True))

    # handlers by name (on_…): a mixin's @on handlers are not collected by Textual's metaclass
    def on_orphans_scanned(self, message: OrphansScanned) -> None:
        for t in getattr(message.scan, "servers", []):  # a teammate's server: said, never a question
            self.notify(f"starting beside {t.describe()}", timeout=8)
        if not message.scan.orphans:
            self._set_phase("restart" if message.restart else "start")
            self.start_worker(False, message.done, message.restart)
            return
        # start-up: loaded on first use, not before the console's first frame
        from tui.screens.orphans import OrphanScreen

        self._set_phase(None)

        def chosen(choice: str | None) -> None:
            if choice is None:
                what = "not restarted (the old server keeps running)" if message.restart else "not started"
                self.post_message(ActionFinished("restart" if message.restart else "start",
                                                 message.done + f"{what}; orphans left running", error=True))
            else:
                self._set_phase("restart" if message.restart else "start")
                self.start_worker(choice == "force", message.done, message.restart)

        self.app.push_screen(OrphanScreen(message.scan, self.app.client, self.app.gpus), chosen)

    @work(group="start", exclusive=True, exit_on_error=False)
    async def start_worker(self, allow_orphans: bool, done: str = "", restart: bool = False) -> None:
        client = self.app.client
        action = "restart" if restart else "start"
        try:
            if restart:  # every question was asked: now the old server stops
                keeper = getattr(client, "restart_keeping", None)
                if keeper is not None:  # the real client: the old server comes back if the new cannot start
                    ok, text = await asyncio.to_thread(keeper, allow_orphans)
                    self.post_message(ActionFinished(action, text, error=not ok))
                    return
                done += await asyncio.to_thread(client.stop) + "; "
            text = await asyncio.to_thread(client.start, allow_orphans)
            self.post_message(ActionFinished(action, done + text))
        except Exception as e:
            self.post_message(ActionFinished(action, done + str(e), error=True))

    def on_action_finished(self, message: ActionFinished) -> None:
        self.busy, self.busy_action = False, None
        self._set_phase(None)
        self.notify(f"{message.action}: {message.text}", severity="error" if message.error else "information",
                    timeout=8)
        queued, self.queued = self.queued, None
        if queued and not message.error:
            self._run_action(queued)
