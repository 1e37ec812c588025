"""MainScreen: status line, live log, startup figures, failure banner; keys s/x/r/q, e settings."""

from __future__ import annotations

import asyncio

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane

from tui.messages import (ActionFinished, ChatFinished, GpusSampled, MetricsSampled, OrphansScanned, PlanReady,
                          ServerPolled)
from tui.widgets.chat_pane import ChatPane
from tui.widgets.failure_banner import FailureBanner
from tui.widgets.figures_panel import FiguresPanel
from tui.widgets.gpu_panel import GpuPanel
from tui.widgets.ledger_panel import LedgerPanel
from tui.widgets.log_pane import LogPane
from tui.widgets.metrics_panel import MetricsPanel
from tui.widgets.status_bar import StatusBar

POLL_S = 0.2


class MainScreen(Screen):
    CSS_PATH = "main.tcss"
    BINDINGS = [
        Binding("s", "start", "Start", id="start"),
        Binding("x", "stop", "Stop", id="stop"),
        Binding("r", "restart", "Restart", id="restart"),
        Binding("q", "quit_console", "Quit", id="quit"),
        Binding("slash", "search", "Search log", id="search"),
        Binding("l", "cycle_level", "Level filter", id="level"),
        Binding("c", "chat", "Chat/Log", id="chat"),
        Binding("d", "doctor", "Doctor", id="doctor"),
        Binding("b", "bench", "Load test", id="bench"),
        Binding("e", "settings", "Settings", id="settings"),
        Binding("escape", "clear_filters", "Clear filters", id="clear", show=False),
        Binding("question_mark", "toggle_keys", "Keys", id="keys"),
    ]

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield FailureBanner(id="failure")
        with Horizontal(id="body"):
            with TabbedContent(id="tabs", initial="tab-log"):
                with TabPane("Log", id="tab-log"):
                    yield LogPane(max_lines=int(self.app.settings.console["log_max_lines"]), id="log")
                with TabPane("Chat", id="tab-chat"):
                    yield ChatPane(id="chat")
            with VerticalScroll(id="side"):
                yield FiguresPanel(id="figures")
                yield MetricsPanel(id="metrics")
                yield LedgerPanel(id="ledger")
                yield Vertical(id="gpus")
        yield Input(placeholder="search the log (enter: filter, esc: clear)", id="search")
        yield Footer()

    def on_mount(self) -> None:
        self.state: dict = {"state": "stopped"}
        self.busy = False
        self.plan: dict | None = None
        self.plan_error: str | None = None
        self.parsed: dict = {}
        self.measured_tps: float | None = None
        self.compute_plan()
        self.poll_server()
        self.read_metrics()
        if self.app.gpus is not None and self.app.gpus.available():
            self.sample_gpus()
        else:
            reason = self.app.gpus.reason if self.app.gpus is not None else "NVML not used"
            self.query_one("#gpus").mount(Static(f"GPUs: {reason}", classes="dim"))

    @work(group="plan", exclusive=True, exit_on_error=False)
    async def compute_plan(self) -> None:
        from backend.ledger import plan_for_console

        plan, error = await asyncio.to_thread(plan_for_console, self.app.settings, self.app.gpus)
        self.post_message(PlanReady(plan, error))

    @on(PlanReady)
    def plan_ready(self, message: PlanReady) -> None:
        self.plan, self.plan_error = message.plan, message.error
        self.query_one(ChatPane).ceiling = (self.plan or {}).get("decode_tokens_per_s_ceiling")
        self._show_ledger()

    @on(ChatFinished)
    def chat_finished(self, message: ChatFinished) -> None:
        tps = message.result.tokens_per_s if message.result is not None else None
        if tps:  # the measured decode rate, beside the ledger's batch-1 ceiling
            self.measured_tps = tps
            if self.plan:
                self._show_ledger()

    def action_bench(self) -> None:
        from tui.screens.bench import BenchScreen

        if self.state.get("state") != "ready":
            self.notify("the load test needs a READY server: s starts it", severity="warning")
            return
        self.app.push_screen(BenchScreen(self.state, self.plan))

    def action_toggle_keys(self) -> None:
        """The keys of whatever has focus, with what they do (Textual's help panel)."""
        from textual.widgets import HelpPanel

        if self.query(HelpPanel):
            self.app.action_hide_help_panel()
        else:
            self.app.action_show_help_panel()

    def action_doctor(self) -> None:
        from tui.screens.doctor import DoctorScreen

        self.app.push_screen(DoctorScreen())

    def action_chat(self) -> None:
        tabs = self.query_one(TabbedContent)
        if tabs.active == "tab-chat":
            tabs.active = "tab-log"
            self.query_one(LogPane).focus()
        else:
            tabs.active = "tab-chat"
            self.query_one(ChatPane).focus_input()

    def _show_ledger(self) -> None:
        from backend.ledger import compare

        rows = compare(self.plan, self.parsed) if self.plan else []
        self.query_one(LedgerPanel).show(self.plan, rows, self.measured_tps, self.plan_error)

    @work(group="gpus", exclusive=True, exit_on_error=False)
    async def sample_gpus(self) -> None:
        interval = float(self.app.settings.console["gpu_interval_s"])
        from backend.orphans import holders_by_gpu

        def read() -> tuple[list, dict]:
            return self.app.gpus.sample(), holders_by_gpu(self.app.gpus)

        while True:
            samples, holders = await asyncio.to_thread(read)
            self.post_message(GpusSampled(samples, holders))
            await asyncio.sleep(interval)

    @on(GpusSampled)
    def show_gpus(self, message: GpusSampled) -> None:
        box = self.query_one("#gpus")
        panels = list(box.query(GpuPanel))
        for i, sample in enumerate(message.samples):
            if i >= len(panels):
                panels.append(GpuPanel())
                box.mount(panels[-1])
            panels[i].show(sample, message.holders.get(sample.index, []))

    @work(group="metrics", exclusive=True, exit_on_error=False)
    async def read_metrics(self) -> None:
        """While the server is ready: its /metrics every console.metrics_interval_s, with rates."""
        from backend import metrics

        prev = None
        while True:
            interval = float(self.app.settings.console["metrics_interval_s"])
            state = self.state
            if state.get("state") != "ready":
                if prev is not None:
                    self.post_message(MetricsSampled(None, {}))
                prev = None
            else:
                base_url = state.get("base_url") or self.app.settings.base_url
                try:
                    snap = await asyncio.to_thread(metrics.fetch, base_url)
                    self.post_message(MetricsSampled(snap.to_dict(), metrics.rates(prev, snap)))
                    prev = snap
                except metrics.MetricsError as e:
                    self.post_message(MetricsSampled(None, {}, error=str(e)))
            await asyncio.sleep(interval)

    @on(MetricsSampled)
    def show_metrics(self, message: MetricsSampled) -> None:
        self.query_one(MetricsPanel).show(message.snapshot, message.rates, message.error)

    # -- the worker: blocking reads in a thread, results posted as messages ---------------------
    @work(group="poll", exclusive=True, exit_on_error=False)
    async def poll_server(self) -> None:
        client = self.app.client
        while True:
            try:
                poll = await asyncio.to_thread(client.poll)
            except Exception as e:  # a bad state file or log must not close the console
                self.notify(f"cannot read the server state: {e}", severity="error")
                await asyncio.sleep(2)
                continue
            self.post_message(ServerPolled(poll))
            await asyncio.sleep(POLL_S)

    @on(ServerPolled)
    def show_poll(self, message: ServerPolled) -> None:
        poll = message.poll
        log = self.query_one(LogPane)
        if poll.new_log:
            log.reset()
        if poll.lines:
            log.append_lines(poll.lines)
        if poll.new_log or poll.state.get("state") == "stopped":
            self.query_one(LedgerPanel).border_subtitle = ""  # a new launch runs the saved settings
        self.state = poll.state
        settings = self.app.settings
        # while a server runs, its own address and name (settings saved since apply on restart)
        live = poll.state if poll.state.get("state") in ("starting", "ready", "backoff", "stopping") else {}
        base_url = live.get("base_url") or settings.base_url
        name = live.get("served_model_name") or settings.served_name
        self.query_one(StatusBar).show(poll.state, base_url, name)
        self.query_one(ChatPane).endpoint = (base_url, name) if live else None
        self.query_one(FiguresPanel).show(poll.parsed, poll.timeline)
        if poll.parsed != self.parsed:
            self.parsed = poll.parsed
            if self.plan:
                self._show_ledger()
        failure = poll.state.get("failure") if poll.state.get("state") in ("failed", "backoff") else None
        self.query_one(FailureBanner).show(failure or (poll.parsed.get("failure")
                                                       if poll.state.get("state") == "failed" else None))

    # -- actions -----------------------------------------------------------------------------
    def _run_action(self, action: str, exposure_ok: bool = False) -> None:
        if self.busy:
            self.notify("busy: wait for the last action to finish", severity="warning")
            return
        from backend import apikey
        from tui.screens.exposure import ExposureScreen
        from tui.screens.preflight import PreflightScreen, blocking

        exposed = apikey.exposure(self.app.settings) if action in ("start", "restart") else None
        if exposed and not exposure_ok:  # a network bind without a key: one key to go on
            self.app.push_screen(ExposureScreen(exposed),
                                 lambda ok: self._run_action(action, exposure_ok=True) if ok else None)
            return

        problems = blocking(self.plan) if action in ("start", "restart") else []
        if problems:  # a slow launch that the ledger says will fail: say so first
            def chosen(choice: str | None) -> None:
                if choice == "force":
                    self._go(action)
                elif choice == "settings":
                    self.action_settings()

            self.app.push_screen(PreflightScreen(problems), chosen)
            return
        self._go(action)

    def _go(self, action: str) -> None:
        self.busy = True
        self.notify(f"{action}…")
        self.run_action_worker(action)

    @work(group="action", exclusive=True, exit_on_error=False)
    async def run_action_worker(self, action: str) -> None:
        """stop runs at once; start (and restart, after its stop) first looks for orphans."""
        client = self.app.client
        try:
            if action == "stop":
                self.post_message(ActionFinished(action, await asyncio.to_thread(client.stop)))
                return
            done = ""
            if action == "restart":
                done = await asyncio.to_thread(client.stop) + "; "
            scan = await asyncio.to_thread(client.scan_orphans, self.app.settings.env, self.app.gpus)
            self.post_message(OrphansScanned(scan, done))
        except Exception as e:
            self.post_message(ActionFinished(action, str(e), error=True))

    @on(OrphansScanned)
    def orphans_scanned(self, message: OrphansScanned) -> None:
        if not message.scan.processes:
            self.start_worker(False, message.done)
            return
        from tui.screens.orphans import OrphanScreen

        def chosen(choice: str | None) -> None:
            if choice is None:
                self.post_message(ActionFinished("start", message.done + "not started (orphans left running)",
                                                 error=True))
            else:
                self.start_worker(choice == "force", message.done)

        self.app.push_screen(OrphanScreen(message.scan, self.app.client, self.app.gpus), chosen)

    @work(group="start", exclusive=True, exit_on_error=False)
    async def start_worker(self, allow_orphans: bool, done: str = "") -> None:
        try:
            text = await asyncio.to_thread(self.app.client.start, allow_orphans)
            self.post_message(ActionFinished("start", done + text))
        except Exception as e:
            self.post_message(ActionFinished("start", done + str(e), error=True))

    @on(ActionFinished)
    def action_finished(self, message: ActionFinished) -> None:
        self.busy = False
        self.notify(f"{message.action}: {message.text}", severity="error" if message.error else "information",
                    timeout=8)

    def action_start(self) -> None:
        self._run_action("start")

    def action_stop(self) -> None:
        self._run_action("stop")

    def action_restart(self) -> None:
        self._run_action("restart")

    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.display = True
        box.focus()

    @on(Input.Submitted, "#search")
    def search_submitted(self, event: Input.Submitted) -> None:
        self.query_one(LogPane).set_view(search=event.value.strip())
        event.input.display = False
        self.query_one(LogPane).focus()

    def action_cycle_level(self) -> None:
        from tui.widgets.log_pane import LEVELS

        log = self.query_one(LogPane)
        log.set_view(level=LEVELS[(LEVELS.index(log.level) + 1) % len(LEVELS)])

    def action_clear_filters(self) -> None:
        box = self.query_one("#search", Input)
        box.value, box.display = "", False
        self.query_one(LogPane).set_view(level="all", search="")

    def action_quit_console(self) -> None:
        self.app.request_quit(self.state.get("state", "stopped"))

    def action_settings(self) -> None:
        from tui.screens.settings import SettingsScreen

        self.app.push_screen(SettingsScreen(lambda: self.state.get("state")), self._settings_closed)

    def _settings_closed(self, result: str | None) -> None:
        if result:  # something was saved: the plan for the settings now in the file
            self.compute_plan()
            if result != "restart" and self.state.get("state") in ("starting", "ready", "backoff"):
                # the log column is still the running server's: say the plan is ahead of it
                self.query_one(LedgerPanel).border_subtitle = "plan: saved settings, restart to apply"
        if result == "restart":
            self.action_restart()
