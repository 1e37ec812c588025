"""MainScreen's mixin for the keys that open a dialog (p e g d b h t n j) and their answers: main.py under 600 lines."""

from __future__ import annotations

import asyncio
import importlib
from typing import TYPE_CHECKING

from textual import work

from backend.server.status import RUNNING, ServerState
from tui.widgets.ledger_panel import LedgerPanel

if TYPE_CHECKING:
    from tui.screens.server_actions import MainScreenParts
else:
    MainScreenParts = object


class MainDialogs(MainScreenParts):
    """Expects: self.app (QwenApp), self.state, self.plan, self.compute_plan, self.shown_profile,
    self._show_status, self._run_action (MainScreenParts)."""

    # -- workload profiles (p) -------------------------------------------------------------------
    def action_profiles(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from tui.screens.profiles import ProfileScreen

        running = self.state.get("state") in ("starting", "ready", "backoff", "sleeping")
        self.app.push_screen(ProfileScreen(self.shown_profile(), running), self._profile_chosen)

    def _profile_chosen(self, name: str | None) -> None:
        if name is None:
            return
        new = name or None
        running = self.state.get("state") in ("starting", "ready", "backoff", "sleeping")
        if new == self.app.settings.profile and (not running or new == self.shown_profile()):
            self.notify(f"profile {new or '(none)'}: already in use")
            return
        label = f"profile {new}" if new else "no profile ([server] as in the file)"
        if not running:
            self._switch_profile(new)
            self.notify(f"{label}: the next start (s) uses it")
            return
        # start-up: loaded on first use, not before the console's first frame
        from tui.screens.confirm import ConfirmScreen

        def chosen(yes: bool | None) -> None:
            if yes:
                self._switch_profile(new, restart=True)
            else:
                self.notify("profile: unchanged")

        self.app.push_screen(ConfirmScreen(f"Restart the server with {label}?",
                                           f"It is {self.state.get('state', '').upper()}; the restart takes "
                                           "as long as a start."), chosen)

    def _switch_profile(self, name: str | None, restart: bool = False) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.errors import ConfigError
        from backend.spawn import origin_of

        origin = origin_of(self.app.settings).with_profile(name)
        try:
            new = origin.load()
        except ConfigError as e:
            self.notify(str(e), severity="error")
            return
        self.app.reload_settings(new)
        client = self.app.client
        if hasattr(client, "origin"):  # the supervisor it starts reads the same settings
            client.origin = origin
        self.restart_after_plan = restart
        self.compute_plan()
        self._show_status()

    def action_bench(self) -> None:
        from tui.screens.bench import BenchScreen  # start-up: loaded on first use, not before the console's first frame

        if self.state.state is not ServerState.READY:
            self.notify("the load test needs a READY server: s starts it", severity="warning")
            return
        self.app.push_screen(BenchScreen(self.state, self.plan))

    def action_doctor(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from tui.screens.doctor import DoctorScreen

        self.app.push_screen(DoctorScreen())

    def action_pull(self, repo_id: str | None = None) -> None:
        from tui.screens.pull import PullScreen  # start-up: loaded on first use, not before the console's first frame

        self.app.push_screen(PullScreen(repo_id), self._settings_closed)

    @work(group="pull-check", exclusive=True, exit_on_error=False)
    async def check_pull(self) -> None:
        """A pull that a previous console (or `pull --detach`) started: say so once."""
        # start-up: imported in a thread (~12-25 ms), not on the event loop
        pull_state = await asyncio.to_thread(importlib.import_module, "backend.pull.state")
        live = await asyncio.to_thread(pull_state.running)
        if live:
            self.notify(f"a pull of {live.get('repo_id')} is running (pid {live.get('pid')}): g shows it", timeout=8)

    def action_history(self) -> None:
        """h: the flight recorder's last hour / day (what the supervisor sampled from /metrics, its events)."""
        from tui.screens.history import HistoryScreen  # start-up: loaded on first use

        self.app.push_screen(HistoryScreen())

    def action_report(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from tui.screens.report import ReportScreen

        self.app.push_screen(ReportScreen())

    def action_cluster(self) -> None:
        """n: the cluster view ([cluster] in the config file: the boxes and the router in front)."""
        from backend.cluster.config import load_cluster  # only this path needs it (start-up, or a cycle)
        from backend.errors import ConfigError  # only this path needs it (start-up, or a cycle)
        from tui.screens.cluster import ClusterScreen  # only this path needs it (start-up, or a cycle)

        try:
            cluster = load_cluster(self.app.settings)
        except ConfigError as e:
            self.notify(str(e), severity="error")
            return
        if cluster is None:
            self.notify("no [cluster] in the config file: one box only (see config.toml's [cluster] example)",
                        severity="warning")
            return
        self.app.push_screen(ClusterScreen(cluster))

    def action_events(self) -> None:
        from tui.screens.events import EventsScreen  # start-up: loaded on first use, not before the first frame

        self.app.push_screen(EventsScreen())

    def action_settings(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from tui.screens.settings import SettingsScreen

        self.app.push_screen(SettingsScreen(lambda: self.state.state), self._settings_closed)

    def _settings_closed(self, result: str | None) -> None:
        if result:  # something was saved: the plan for the settings now in the file
            self.compute_plan()
            if result != "restart" and self.state.state in RUNNING:
                # the log column is still the running server's: say the plan is ahead of it
                self.query_one(LedgerPanel).border_subtitle = "plan: saved settings, restart to apply"
        if result == "restart":  # asked for in the settings dialog: no second question
            self._run_action("restart")
