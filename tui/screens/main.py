"""MainScreen: status line, live log, startup figures, failure banner; keys s/x/r/q (the dialogs: main_dialogs.py).

Keys are a contract (STYLE 20): while the chat tab is shown every printable key goes to the chat
input, so a sentence never starts the server or opens a dialog; `esc` there keeps the user in the
chat (a second `esc` goes back to the log, where the single-letter keys are commands again).
Below NARROW_W columns the side column folds into a one-line figure strip; `i` opens it.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import TYPE_CHECKING, Any, cast

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Input, Static

from backend.server.status import FAILING, SERVING, SUPERVISED, ServerState, ServerStatus
from tui.console_app import WATCH_BLOCKED
from tui.lazy import load
from tui.messages import ActionFinished, ChatFinished, GpusSampled, HostSampled, MetricsSampled, PlanReady, ServerPolled
from tui.node import QwenNode
from tui.screens.fix_actions import FixActions
from tui.screens.main_dialogs import MainDialogs
from tui.screens.server_actions import ServerActions
from tui.widgets.figure_strip import FigureStrip
from tui.widgets.figures_panel import FiguresPanel
from tui.widgets.gpu_panel import GpuPanel
from tui.widgets.host_panel import HostPanel
from tui.widgets.keys_footer import KeysFooter
from tui.widgets.ledger_panel import LedgerPanel
from tui.widgets.log_pane import LogPane
from tui.widgets.metrics_panel import MetricsPanel
from tui.widgets.side_panels import SidePanels
from tui.widgets.status_bar import StatusBar
from tui.widgets.view_tabs import ViewTabs

if TYPE_CHECKING:
    from backend.gpu_facts import GpuSample
    from backend.server.client import Poll
    from backend.server.orphans import Holder
    from backend.settings import Settings
    from tui.widgets.chat_pane import ChatPane
    from tui.widgets.failure_banner import FailureBanner

POLL_S = 0.2
IDLE_POLL_S = 0.5  # a settled server's poll: a new state or log line shows within half a second
SETTLED = frozenset({ServerState.READY, ServerState.STOPPED, ServerState.SLEEPING, ServerState.FAILED})
FIRST_POLL_S = 0.2  # the first frame waits this long at most for the first poll (then goes without)
NARROW_W = 100  # below this many columns the side column becomes the one-line strip
EMPTY_LOG = "No server log yet: press s to start the server (e: settings, d: doctor, ?: every key)."


class MainScreen(ServerActions, FixActions, MainDialogs, QwenNode, Screen[None]):
    # its stylesheet, screens/main.tcss, is loaded with the app's (tui/app.py)
    BINDINGS = [
        Binding("s", "start", "Start", id="start"),
        Binding("x", "stop", "Stop", id="stop"),
        Binding("r", "restart", "Restart", id="restart"),
        Binding("q", "quit_console", "Quit", id="quit"),
        Binding("c", "chat", "Chat", id="chat"),
        Binding("e", "settings", "Settings", id="settings"),
        Binding("d", "doctor", "Doctor", id="doctor"),
        Binding("b", "bench", "Load test", id="bench"),
        Binding("i", "toggle_side", "Panels", id="side"),
        Binding("slash", "search", "Search log", id="search"),
        Binding("l", "cycle_level", "Level filter", id="level"),
        Binding("p", "profiles", "Profiles", id="profiles"),
        Binding("v", "toggle_prefix", "Log prefix", id="prefix"),
        Binding("t", "report", "Report", id="report"),
        Binding("z", "sleep_wake", "Sleep/Wake", id="sleep"),
        Binding("n", "cluster", "Cluster", id="cluster"),
        Binding("j", "events", "Events", id="events"),
        Binding("g", "pull", "Get model", id="pull"),
        Binding("h", "history", "History", id="history"),
        Binding("f", "apply_fix", "Apply the failure's fix", id="fix"),
        Binding("k", "dump_stacks", "Dump the server's stacks", id="stacks"),
        Binding("escape", "clear_filters", "Clear filters / close panels", id="clear", show=False),
        Binding("question_mark", "toggle_keys", "Keys", id="keys"),
        Binding("f1", "toggle_keys", "Keys", id="keys-f1", show=False),  # ? is text in an input
        # esc closes the keys panel before anything else sees it (the chat's esc would stop a reply)
        Binding("escape", "hide_keys", "Close the keys", id="keys-close", show=False, priority=True),
    ]

    narrow = False
    _resumed = False  # the first ScreenResume has come (on_screen_resume)
    state: ServerStatus = ServerStatus(ServerState.STOPPED)  # the last poll's, replaced (never mutated) on each poll
    server_profile: str | None = None  # the running server's workload profile (the last poll's)
    # what the chat pane is given, kept here until it is first shown (it is made then)
    chat_ceiling: float | None = None
    chat_endpoint: tuple[str, str] | None = None

    def compose(self) -> ComposeResult:
        # the width's class before the children exist: set in on_mount it restyled every widget once
        # more before the first frame (~10 ms at 80 columns)
        self.narrow = 0 < self.app.size.width < NARROW_W
        self.set_class(self.narrow, "-narrow", update=False)
        yield StatusBar(id="status")
        # the failure banner (#failure) is mounted under it on the first failure (failure_banner())
        if self.narrow:  # the side column in one line; at a wider start, made once it is narrow (_apply_width)
            yield FigureStrip(id="strip")
        with Horizontal(id="body"):
            with Vertical(id="tabs"):  # the log or the chat: the `-chat` class says which (main.tcss)
                yield ViewTabs(id="views")
                yield Static(EMPTY_LOG, id="log-hint")
                yield LogPane(max_lines=int(self.app.settings.console_cfg.log_max_lines), id="log",
                              classes="panel")
                # the chat pane (#chat) is mounted here on its first showing (chat_pane())
            with SidePanels(id="side"):
                yield FiguresPanel(id="figures", classes="panel")
                yield MetricsPanel(id="metrics", classes="panel")
                yield LedgerPanel(id="ledger", classes="panel")
                yield Vertical(id="gpus")
                yield HostPanel(id="host", classes="panel")
        yield KeysFooter(id="footer")

    async def on_mount(self) -> None:
        self.state = ServerStatus(ServerState.STOPPED)
        self.plan: dict[str, Any] | None = None
        self.plan_error: str | None = None
        self.parsed: dict[str, Any] = {}
        self.measured_tps: float | None = None
        self.requests_running: int | None = None
        self.gpu_memory: tuple[float, float] | None = None  # GiB used, total over the cards
        self._chat_escape_at = 0.0
        # the ledger's imports (~50 ms) and the pull check's (~12 ms): after the first frame. Not
        # call_after_refresh alone: the screen's first refresh comes inside the app's start-up batch,
        # which Textual does not draw, and they slowed the one drawn after it. The app's own queue is
        # read once that batch has ended: from there, after the next refresh, the first frame is out
        self.app.call_later(self.call_after_refresh, self._after_first_frame)
        self._apply_width(self.size.width)
        self._first_poll: asyncio.Future[Poll] | None = asyncio.get_running_loop().create_future()
        self.poll_server()
        self.read_metrics()
        await self._show_first_poll()

    async def _show_first_poll(self) -> None:
        """The first frame with the server's state and log in it: one layout and paint, not a frame
        with an empty status line and a second one a poll later (~30 ms of the start here). A poll
        slower than FIRST_POLL_S (a long log to parse) comes as every later one does."""
        first = self._first_poll
        assert first is not None
        poll: Poll | None
        try:
            poll = await asyncio.wait_for(asyncio.shield(first), FIRST_POLL_S)
        except TimeoutError:
            poll = first.result() if first.done() else None
        self._first_poll = None  # from here the worker posts every poll
        if poll is not None:
            self.show_poll(ServerPolled(poll))

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        # the first resume comes just after the mount styled every widget (and each change since
        # restyled what it touched): Textual's restyle of the whole screen there found nothing to
        # change and cost ~3 ms of the first frame. Later ones (after a dialog) restyle as Textual does
        if not self._resumed:
            self._resumed = True
            event.refresh_styles = False

    # -- layout ---------------------------------------------------------------------------------
    def on_resize(self, event: events.Resize) -> None:
        self._apply_width(event.size.width)

    def _apply_width(self, width: int) -> None:
        narrow = 0 < width < NARROW_W
        if narrow != self.narrow:
            self.narrow = narrow
            if narrow and not self.query("#strip"):
                self.mount(FigureStrip(id="strip"), after="#failure" if self.query("#failure") else "#status")
                self._show_strip()
            self.set_class(narrow, "-narrow")
            if not narrow:
                self.remove_class("-side-open")
            self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "toggle_side":
            return self.narrow  # the strip's key, only when there is a strip
        if action == "hide_keys":
            return bool(self.query("HelpPanel"))  # otherwise esc goes on to the chat, the search, the filters
        return not (self.app.watching and action in WATCH_BLOCKED)

    def action_toggle_side(self) -> None:
        self.toggle_class("-side-open")
        if self.has_class("-side-open"):  # focused, ↑↓ and pgup/pgdn scroll the panels at once (not after tab)
            self.query_one("#side").focus()
        elif self.query_one("#side").has_focus:
            self.query_one(LogPane).focus()

    def _show_strip(self) -> None:
        for strip in self.query(FigureStrip):  # none until the screen is first narrow
            strip.show(self.state.state, self.parsed, self.gpu_memory, self.state.workers)

    def _show_pending(self) -> None:
        if self.is_mounted:
            self._show_status()

    def _show_status(self) -> None:
        settings = self.app.settings
        live = self.state.state in SUPERVISED
        base_url = (live and self.state.base_url) or settings.base_url
        name = (live and self.state.served_model_name) or settings.served_name
        from backend.events import last_event_text  # start-up: loaded on first use, not before the first frame

        self.query_one(StatusBar).show(self.state, base_url, name, self.parsed, self.pending_text(),
                                       profile=self.shown_profile(), last_event=last_event_text())

    def shown_profile(self) -> str | None:
        """The running server's profile (its supervisor's settings), else the one the next start uses."""
        if self.state.state in SUPERVISED:
            return self.server_profile
        return self.app.settings.profile

    # -- keys while the chat tab is shown ----------------------------------------------------------
    @property
    def view(self) -> str:
        """What the left column shows: "log" or "chat"."""
        return self.query_one(ViewTabs).active

    async def show_view(self, view: str) -> None:
        """Show the log or the chat; the chat's widgets are built the first time it is shown."""
        if view == "chat":
            await (await self.chat_pane()).build()
        self.query_one(ViewTabs).show(view)
        self.query_one("#tabs").set_class(view == "chat", "-chat")

    def shown_chat_pane(self) -> ChatPane | None:
        """The chat pane once it has been made (on its first showing), else None."""
        panes = self.query("#chat")
        return cast("ChatPane", panes.first()) if panes else None

    async def chat_pane(self) -> ChatPane:
        """The chat pane, mounted on first use: its widgets, module and session wait for the chat
        (it cost ~4 ms of the first frame, hidden)."""
        pane = self.shown_chat_pane()
        if pane is None:
            from tui.widgets.chat_pane import ChatPane  # start-up: loaded with the chat, not the console

            pane = ChatPane(id="chat")
            pane.ceiling, pane.endpoint = self.chat_ceiling, self.chat_endpoint
            await self.query_one("#tabs").mount(pane)
        return pane

    async def on_key(self, event: events.Key) -> None:
        """In the chat tab a printable key is text: into the chat input, never a command. So are the
        keys typed after `/` before its box has the focus (`/vllm` pasted at once toggled the prefix)."""
        if not event.is_printable:
            return
        if self.view == "chat":
            if isinstance(self.focused, Input):
                return
            event.stop()
            event.prevent_default()
            pane = await self.chat_pane()
            await pane.build()  # shown by a click on its tab an instant ago: its input may not be there yet
            box = pane.query_one("#chat-input", Input)
            box.focus()
            box.insert_text_at_cursor(event.character or "")
            return
        search = self._search_box()
        # the box takes the keys sent while it has the focus: one here was sent before it had it
        if self._search_typed is not None or (search is not None and search.display and search.has_focus):
            event.stop()
            event.prevent_default()
            if search is not None and search.display:
                search.focus()
                search.insert_text_at_cursor(event.character or "")
            else:  # `/`'s box is being made: its keys wait for it
                self._search_typed = (self._search_typed or "") + (event.character or "")
        elif event.key == "slash" and not isinstance(self.focused, Input) and self.check_action("search", ()):
            self._search_typed = ""  # from here until its box has the focus, keys are its text

    async def on_view_tabs_picked(self, message: ViewTabs.Picked) -> None:
        """A click on the log's or the chat's name: as `c` would (the chat's input takes the focus)."""
        if message.view != self.view:
            await self.action_chat()

    async def on_chat_pane_escaped(self, message: ChatPane.Escaped) -> None:
        """esc in the chat (not streaming): the first one stays; a second within 2 s goes to the log."""
        now = time.monotonic()
        if now - self._chat_escape_at < 2.0:
            self._chat_escape_at = 0.0
            await self.action_chat()
        else:
            self._chat_escape_at = now
            self.notify("esc again: back to the log (the letter keys are commands there)", timeout=2)

    def _after_first_frame(self) -> None:
        self.app.first_frame_shown()
        self.sample_gpus()  # NVML opens in its thread (the console's monitor is made unopened)
        self.sample_host()  # psutil is imported in its thread
        self.compute_plan()
        self.check_pull()
        self.set_timer(1.0, self._preload_chat)

    def _preload_chat(self) -> None:
        self.run_worker(lambda: load("tui.widgets.chat_pane").preload(), thread=True, group="chat-preload",
                        exit_on_error=False)

    @work(group="plan", exclusive=True, exit_on_error=False)
    async def compute_plan(self) -> None:
        plan, error = await asyncio.to_thread(_plan_for_console, self.app.settings, self.app.gpus)
        self.post_message(PlanReady(plan, error))

    @on(PlanReady)
    def plan_ready(self, message: PlanReady) -> None:
        self.plan, self.plan_error = message.plan, message.error
        self.chat_ceiling = (self.plan or {}).get("decode_tokens_per_s_ceiling")
        if (pane := self.shown_chat_pane()) is not None:
            pane.ceiling = self.chat_ceiling
        self._show_ledger()
        if getattr(self, "restart_after_plan", False):  # a profile switch: restart on its own plan
            self.restart_after_plan = False
            self._run_action("restart")

    @on(ChatFinished)
    def chat_finished(self, message: ChatFinished) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.chat.conversation import measured_decode_rate

        # the measured decode rate beside the ledger's batch-1 ceiling; never a burst or an impossible rate
        tps = measured_decode_rate(message.result, (self.plan or {}).get("decode_tokens_per_s_ceiling"))
        if tps:
            self.measured_tps = tps
            if self.plan:
                self._show_ledger()

    def action_toggle_keys(self) -> None:
        """The keys of whatever has focus, with what they do (Textual's help panel)."""
        from textual.widgets import HelpPanel  # start-up: loaded on first use, not before the console's first frame

        if self.query(HelpPanel):
            self.app.action_hide_help_panel()
        else:
            self.app.action_show_help_panel()

    def action_hide_keys(self) -> None:
        self.app.action_hide_help_panel()

    def action_sleep_wake(self) -> None:
        """z: a READY server goes to sleep (level 1: the GPUs freed, weights kept in RAM); a sleeping one wakes."""
        state = self.state.state
        if state not in SERVING:
            self.notify("sleep needs a READY server (and server.enable_sleep_mode = true)", severity="warning")
            return
        if self.busy:
            self.notify("busy: wait for the last action to finish", severity="warning")
            return
        action = "wake" if state is ServerState.SLEEPING else "sleep"
        warning = self.sleep_fit_warning() if action == "sleep" else None
        now = time.monotonic()
        if warning and now - getattr(self, "_sleep_warned_at", 0.0) > 5.0:  # the host could swap or OOM-kill
            self._sleep_warned_at = now
            self.notify(f"{warning}. z again within 5 s: sleep anyway", severity="warning", timeout=6)
            return
        self._sleep_warned_at = 0.0
        self.busy = True
        self.notify(f"{action}…")
        self.sleep_worker(action)

    @work(group="action", exclusive=True, exit_on_error=False)
    async def sleep_worker(self, action: str) -> None:
        ok, text = await asyncio.to_thread(self.app.client.sleep_wake, action)
        self.post_message(ActionFinished(action, text, error=not ok))

    async def action_chat(self) -> None:
        if self.view == "chat":
            await self.show_view("log")
            self.query_one(LogPane).focus()
        else:
            await self.show_view("chat")
            pane = await self.chat_pane()
            pane.focus_input()
            if not pane.help_in_view():  # else the help says it, and a toast at the top right covered it
                self.notify("chat: every key is text now; esc esc goes back to the log", timeout=3)

    def _show_ledger(self) -> None:
        from backend.ledger import compare  # start-up: loaded on first use, not before the console's first frame

        rows = compare(self.plan, self.parsed) if self.plan else []
        self.query_one(LedgerPanel).show(self.plan, rows, self.measured_tps, self.plan_error)

    @work(group="gpus", exclusive=True, exit_on_error=False)
    async def sample_gpus(self) -> None:
        """The GPU panels, one per card, every console.gpu_interval_s; or why there are none."""
        gpus = self.app.gpus
        # available() opens an unopened monitor (pynvml's import, nvmlInit: off the event loop)
        if gpus is None or not await asyncio.to_thread(gpus.available):
            reason = gpus.reason if gpus is not None else "NVML not used"
            await self.query_one("#gpus").mount(Static(f"GPUs: {reason}", classes="dim"))
            return
        interval = float(self.app.settings.console_cfg.gpu_interval_s)
        # start-up: loaded on first use, not before the console's first frame
        from backend.server.orphans import holders_by_gpu

        def read() -> tuple[list[GpuSample], dict[int, list[Holder]]]:
            return gpus.sample(), holders_by_gpu(gpus)

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
                panels.append(GpuPanel(classes="panel"))
                box.mount(panels[-1])
            panels[i].show(sample, message.holders.get(sample.index, []))
        used = [s.memory_used_bytes for s in message.samples if s.memory_used_bytes is not None]
        total = [s.memory_total_bytes for s in message.samples if s.memory_total_bytes]
        self.gpu_memory = (sum(used) / 2**30, sum(total) / 2**30) if used and total else None
        self._show_strip()

    @work(group="host", exclusive=True, exit_on_error=False)
    async def sample_host(self) -> None:
        """The host panel every console.host_interval_s: CPU, RAM, swap, the server's RSS (psutil, in a thread)."""
        host = await asyncio.to_thread(importlib.import_module, "backend.host")  # psutil: not before the first frame
        while True:
            st = self.state
            live = st.state in SUPERVISED
            sample = await asyncio.to_thread(host.sample, st.get("supervisor_pid") if live else None,
                                             st.get("pid") if live else None)
            self.post_message(HostSampled(sample))
            await asyncio.sleep(float(self.app.settings.console_cfg.host_interval_s))

    def sleep_fit_warning(self, available: int | None = None) -> str | None:
        """Would a level-1 sleep fit in the host's free RAM (the weights from the log, else the plan)?"""
        from backend.server.sleep import sleep_fit, weights_bytes  # start-up: httpx, not before the first host sample

        sample = getattr(self, "host_sample", None)
        if sample is None:
            return None
        tp = int(self.app.settings.server_cfg.tensor_parallel_size or 1)
        weights = weights_bytes(self.parsed, self.plan, tp)
        level = self.state.get("sleep_level") if self.state.state is ServerState.SLEEPING else None
        return sleep_fit(weights, sample.ram_available_bytes if available is None else available, level)

    @on(HostSampled)
    def show_host(self, message: HostSampled) -> None:
        self.host_sample = message.sample
        self.query_one(HostPanel).show(message.sample, self.sleep_fit_warning())

    @work(group="metrics", exclusive=True, exit_on_error=False)
    async def read_metrics(self) -> None:
        """While the server is ready: its /metrics every console.metrics_interval_s, with rates."""
        prev, reader = None, None
        while True:
            interval = float(self.app.settings.console_cfg.metrics_interval_s)
            state = self.state
            if state.state is not ServerState.READY:
                if prev is not None:
                    self.post_message(MetricsSampled(None, {}))
                prev = None
            else:
                base_url = state.base_url or self.app.settings.base_url
                # httpx: imported once a server is READY (not before the first frame), in a thread
                metrics = await asyncio.to_thread(importlib.import_module, "backend.metrics")

                reader = reader or metrics.MetricsReader(self.app.settings.api_key)  # one client
                try:
                    snap = await asyncio.to_thread(reader.fetch, base_url)
                    snap = metrics.without_probe(snap, dict(state.probe or {}))  # the user's requests only
                    self.post_message(MetricsSampled(snap.to_dict(), metrics.rates(prev, snap)))
                    prev = snap
                except metrics.MetricsError as e:
                    self.post_message(MetricsSampled(None, {}, error=str(e)))
            await asyncio.sleep(interval)

    @on(MetricsSampled)
    def show_metrics(self, message: MetricsSampled) -> None:
        self.requests_running = (message.snapshot or {}).get("running")
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
            first = self._first_poll
            if first is not None and not first.done():
                first.set_result(poll)  # on_mount shows it, in the first frame
            else:
                self.post_message(ServerPolled(poll))
            # settled (ready, stopped, asleep, failed; no new log line, no action under way): poll less
            # often, which is most of an idle console's CPU; any change brings the fast pace back
            settled = (poll.state.state in SETTLED and not poll.lines and not poll.new_log
                       and not getattr(self, "busy", False))
            await asyncio.sleep(IDLE_POLL_S if settled else POLL_S)

    @on(ServerPolled)
    def show_poll(self, message: ServerPolled) -> None:
        poll = message.poll
        log = self.query_one(LogPane)
        if poll.new_log:
            log.reset()
        if poll.lines:
            log.append_lines(poll.lines)
        ledger = self.query_one(LedgerPanel)
        if (poll.new_log or poll.state.state is ServerState.STOPPED) and ledger.border_subtitle:
            ledger.border_subtitle = ""  # a new launch runs the saved settings (set only if shown: each set redraws)
        self.state = poll.state
        self.server_profile = poll.profile
        # no log yet and nothing running: the hint in the log's place
        self.query_one("#tabs").set_class(not log.all_lines and self.state.state is ServerState.STOPPED, "-no-log")
        settings = self.app.settings
        # while a server runs, its own address and name (settings saved since apply on restart)
        live = poll.state.state in SUPERVISED
        base_url = (live and poll.state.base_url) or settings.base_url
        name = (live and poll.state.served_model_name) or settings.served_name
        self.chat_endpoint = (base_url, name) if live else None
        if (pane := self.shown_chat_pane()) is not None:
            pane.endpoint = self.chat_endpoint
        self.query_one(FiguresPanel).show(poll.parsed, poll.timeline, poll.state.workers)
        if poll.parsed != self.parsed:
            self.parsed = poll.parsed
            if self.plan:
                self._show_ledger()
        self._show_status()
        self._show_strip()
        state = poll.state.state
        failure = poll.state.failure if state in FAILING else None
        failure = failure or (poll.parsed.get("failure") if state is ServerState.FAILED else None)
        last = poll.state.last_failure
        earlier = not failure and bool(last) and state in (ServerState.STARTING, ServerState.BACKOFF)
        shown = last if earlier else failure  # while it tries again: why the last attempt failed
        if (banner := self.failure_banner(make=bool(shown))) is not None:
            banner.show(shown, earlier=earlier)
        self.offer_fix(shown)

    def failure_banner(self, make: bool = False) -> FailureBanner | None:
        """The failure banner; made (under the status bar) with make=True the first time a failure is
        shown, None before that: most starts never need it (it was ~0.8 ms of the first frame)."""
        found = self.query("#failure")
        if found:
            return cast("FailureBanner", found.first())
        if not make:
            return None
        from tui.widgets.failure_banner import FailureBanner  # start-up: with the first failure

        banner = FailureBanner(id="failure")
        self.mount(banner, after="#status")
        return banner

    # `/` seen, its box not focused yet: the text typed since (a paste, a fast typist), or None
    _search_typed: str | None = None

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if event.widget.id == "search":
            self._search_typed = None

    async def action_search(self) -> None:
        box = self._search_box()
        if box is None:  # made on the first `/`: hidden until then, it cost the first frame its styling
            box = Input(placeholder="search the log (enter: filter, esc: clear)", id="search")
            await self.mount(box, before=self.query_one(KeysFooter))
        box.display = True
        box.focus()
        if self._search_typed:
            box.insert_text_at_cursor(self._search_typed)
        self._search_typed = "" if self._search_typed is not None else None

    def _search_box(self) -> Input | None:
        found = self.query("#search")
        return found.first(Input) if found else None

    @on(Input.Submitted, "#search")
    def search_submitted(self, event: Input.Submitted) -> None:
        self.query_one(LogPane).set_view(search=event.value.strip())
        event.input.display = False
        self.query_one(LogPane).focus()

    def action_cycle_level(self) -> None:
        from tui.widgets.log_pane import LEVELS  # start-up: loaded on first use, not before the console's first frame

        log = self.query_one(LogPane)
        log.set_view(level=LEVELS[(LEVELS.index(log.level) + 1) % len(LEVELS)])

    def action_toggle_prefix(self) -> None:
        log = self.query_one(LogPane)
        log.toggle_prefix()
        self.notify("log: full vLLM prefix" if not log.compact else "log: time and process in the gutter",
                    timeout=2)

    def action_clear_filters(self) -> None:
        if self.has_class("-side-open"):
            self.action_toggle_side()
            return
        box = self._search_box()
        self._search_typed = None
        if box is not None:
            box.value, box.display = "", False
        self.query_one(LogPane).set_view(level="all", search="")

    def action_quit_console(self) -> None:
        if self.app.watching:  # nothing to keep or stop: watch mode only looks
            self.app.exit()
            return
        self.app.request_quit(self.state.state)


def _plan_for_console(settings: Settings, gpus: Any) -> tuple[dict[str, Any] | None, str | None]:
    """In a thread: the ledger's imports (~50 ms) stay off the event loop."""
    ledger: Any = load("backend.ledger")  # start-up: first use; one importing thread at a time (tui/lazy.py)
    return ledger.plan_for_console(settings, gpus)  # type: ignore[no-any-return]
