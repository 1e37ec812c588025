"""QwenApp and its factory: the CLI and the tests build the console the same way."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from textual import work
from textual.worker import Worker

from backend import daemon_threads, paths
from backend.server.status import RUNNING, ServerState
from backend.settings import Settings
from tui.console_app import ConsoleApp
from tui.screens.main import MainScreen
from tui.themes import ThemedStylesheet, register_themes, use_themed_stylesheet
from tui.worker_errors import install as report_worker_errors

if TYPE_CHECKING:
    from textual.app import SystemCommand
    from textual.screen import Screen

CSS_KEPT = "tcss.pickle"  # in the cache dir: the stylesheet's parses, kept between starts (tui/themes.py)
EXIT_GRACE_S = 1.5  # after a signal or a quit, the process ends within this even if something hangs
# what each worker group does, for the message that says which one failed
WORKER_PURPOSE = {
    "poll": "the server poll", "gpus": "the GPU sampler", "metrics": "the /metrics reader", "host": "the host sampler",
    "plan": "the memory planner", "action": "a server action", "start": "the start",
    "chat": "the chat", "bench": "the load test", "doctor": "the doctor", "report": "the report",
    "settings-save": "saving a setting", "settings-preview": "the settings preview", "orphan-kill": "the orphan kill",
    "pull-check": "the model check", "pull-start": "the pull", "pull-poll": "the pull's progress",
    "cluster-poll": "the cluster poll", "cluster-action": "a cluster action", "profiles": "the profile planner",
    "conversations": "the conversation list", "sweep": "the sweep", "render": "a reply's render",
    "open": "the streamed reply's render", "chat-budget": "the context budget", "chat-preload": "the chat preload",
    "chat-copy": "the copy", "quit": "the stop before quitting", "history": "the history view",
    "p2p": "the P2P check", "fix": "the fix's proposal", "fix-apply": "applying the fix", "stacks": "the stack dump",
}


class QwenApp(ConsoleApp):  # the screens know it as ConsoleApp (tui/console_app.py): no circle
    TITLE = "qwen-tui"
    # --watch: every panel, no key that changes the server (tui/screens/events.py); not `watch`,
    # which was Textual's DOMNode.watch() shadowed by a bool
    watching = False
    # the main screen's stylesheet too: pushed with its own CSS_PATH, it made Textual parse every
    # rule again with the theme's variables (10-30 ms before the first frame); its rules stay nested
    # under MainScreen
    CSS_PATH = ["app.tcss", "screens/main.tcss"]

    def __init__(self, settings: Settings, client: Any, gpus: Any = None, freeze_gc: bool = False) -> None:
        super().__init__()
        self.freeze_gc = freeze_gc
        self.settings = settings
        self.client = client
        self.gpus = gpus  # a backend.gpu.GpuMonitor (or a test double); None: no GPU panels
        self.quit_choice: str | None = None
        self.main_screen: MainScreen | None = None
        self._quitting = False
        self.worker_failures: list[tuple[str, str, str]] = []  # (name, group, error) of workers that raised
        self._theme_problems = register_themes(self, settings.console_cfg.theme)
        self._themes_set = True
        # after the theme is set: parsed once, with its variables, and kept parsed between starts
        use_themed_stylesheet(self, kept=paths.cache_dir() / CSS_KEPT)
        report_worker_errors(self, self.show_worker_failure)  # every worker's, the app's and its screens'

    # a theme's CSS variables, made once: Textual asks for them for the sheet it makes in its __init__
    # (before this app's themes are registered; use_themed_stylesheet replaces that sheet unparsed)
    # and again on each CSS refresh, ~0.3-0.6 ms each before the first frame
    _themes_set = False
    _css_variables: tuple[Any, dict[str, str]] | None = None  # (the theme, its variables)

    def get_css_variables(self) -> dict[str, str]:
        if not self._themes_set:
            return {}
        theme = self.current_theme
        if self._css_variables is None or self._css_variables[0] is not theme:
            self._css_variables = (theme, super().get_css_variables())
        self.theme_variables = self._css_variables[1]
        return dict(self._css_variables[1])

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Every notification is plain text: they carry config keys ("[cluster]"), paths and error texts,
        which Rich markup would eat or choke on. Screens' and widgets' notify() come through here."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    def get_default_screen(self) -> MainScreen:
        self.main_screen = MainScreen()
        return self.main_screen

    def first_frame_shown(self) -> None:
        """The main screen's first frame is out: the cyclic GC, off since the console's start
        (tui/entry.py), comes back on; what the start built is frozen first, so that the first
        collection does not walk it all (~60 ms here)."""
        if self.freeze_gc and not gc.isenabled():
            gc.freeze()
            gc.enable()
        self.keep_parsed_css()

    def keep_parsed_css(self) -> None:
        """Write the stylesheet's new parses for the next start (after the first frame, and at the exit
        for the dialogs' and the chat's)."""
        if isinstance(self.stylesheet, ThemedStylesheet):
            self.stylesheet.save()

    def _freeze_gc(self) -> None:
        gc.freeze()
        gc.enable()  # on since the first frame; from here on whatever happened to that frame

    def on_mount(self) -> None:
        loop = asyncio.get_running_loop()
        daemon_threads.install(loop)  # a blocking call still running never holds the process at exit
        for problem in self._theme_problems:
            self.notify(problem, severity="warning")
        if self.freeze_gc:
            # what the start-up built lives as long as the console: out of the cyclic GC's sight, so
            # that a full collection (~50-80 ms with it, in the middle of a streamed reply) stays short
            self.set_timer(1.0, self._freeze_gc)
        # Textual does not handle these: an SSH drop (HUP) or a kill (TERM) exits cleanly and
        # leaves the server running; it lives in its own supervisor process.
        for sig in (signal.SIGHUP, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._signalled)
            except (RuntimeError, ValueError, NotImplementedError):  # not the main thread (tests)
                pass

    def show_worker_failure(self, worker: Worker[Any]) -> None:
        """Any worker that raised (they run with exit_on_error=False), whoever started it (the app's
        worker manager hands each on, tui/worker_errors.py): say which, and what, where it is seen;
        otherwise its panel would just stop changing."""
        purpose = WORKER_PURPOSE.get(worker.group, f"worker {worker.group}")
        error = worker.error
        self.worker_failures.append((worker.name, worker.group, repr(error)))
        self.notify(f"{purpose} ({worker.name}) stopped: {type(error).__name__}: {error}",
                    title="worker failed", severity="error", timeout=30)

    def _signalled(self) -> None:
        """SIGHUP / SIGTERM: exit now, and for sure: a watchdog ends the process if exiting hangs."""
        start_exit_watchdog(0)
        self.exit(0)

    def reload_settings(self, settings: Settings | None = None) -> Settings:
        """Adopt settings saved from the console (or read them again: same file, --demo, --set)."""
        from backend.setting_rows import reload  # start-up: loaded on first use, not before the console's first frame

        new = settings if settings is not None else reload(self.settings)
        theme = new.console_cfg.theme
        if theme != self.settings.console_cfg.theme and theme in self.available_themes:
            self.theme = theme
        self.settings = new
        return new

    def get_system_commands(self, screen: Screen[Any]) -> Iterator[SystemCommand]:
        """The palette has the chat's commands too (they also have keys in the chat tab)."""
        from textual.app import SystemCommand  # start-up: loaded on first use, not with the console

        yield from super().get_system_commands(screen)
        if screen is self.main_screen:
            for title, help_text, action in (
                    ("Chat: saved conversations", "reopen, rename, delete or export one (ctrl+o)", "conversations"),
                    ("Chat: this chat's settings", "system prompt, temperature, top_p, max_tokens (ctrl+s)",
                     "chat_settings"),
                    ("Chat: new conversation", "the current one stays saved (ctrl+n)", "new_conversation")):
                yield SystemCommand(title, help_text, lambda a=action: self._chat_action(a))

    async def _chat_action(self, action: str) -> None:
        from tui.widgets.chat_pane import ChatPane  # start-up: loaded on first use, not with the console

        screen = self.main_screen
        if screen is None:
            return
        if screen.view != "chat":
            await screen.action_chat()
        await screen.query_one(ChatPane).run_action(action)

    # -- every way out: q, ctrl+q, ctrl+c, the palette's Quit ---------------------------------
    def server_state(self) -> ServerState:
        screen = self.main_screen
        return screen.state.state if screen is not None else ServerState.STOPPED

    async def action_quit(self) -> None:
        """ctrl+q and the command palette's Quit: the same on_exit policy as q."""
        self.request_quit()

    def action_help_quit(self) -> None:
        """ctrl+c outside a text field (there it copies): quit through the on_exit policy."""
        self.request_quit()

    def request_quit(self, state: ServerState | str | None = None) -> None:
        from tui.screens.quit import QuitScreen  # start-up: loaded on first use, not with the console

        if self._quitting or isinstance(self.screen, QuitScreen):
            return  # already asking, or already stopping on the way out
        state = state or self.server_state()
        policy = self.settings.console_cfg.on_exit
        if state not in RUNNING or policy == "keep":
            self._exit_keep()
        elif policy == "stop":
            self._stop_and_exit()
        else:
            self.push_screen(QuitScreen(), self._quit_chosen)

    def _quit_chosen(self, choice: str | None) -> None:
        if choice == "keep":
            self._exit_keep()
        elif choice == "stop":
            self._stop_and_exit()

    def _exit_keep(self) -> None:
        self.quit_choice = "keep"
        self._quitting = True
        self.exit(0)

    def _stop_and_exit(self) -> None:
        self.quit_choice = "stop"
        self._quitting = True
        self.notify("stopping the server before quitting… (the status line counts down to SIGKILL)")
        self._stop_worker()

    @work(group="quit", exclusive=True, exit_on_error=False)
    async def _stop_worker(self) -> None:
        await asyncio.to_thread(self.client.stop)
        self.exit(0)


def start_exit_watchdog(code: int, after: float = EXIT_GRACE_S) -> None:
    """End the process `after` seconds from now whatever still runs (a daemon timer: it does not
    itself keep the process alive, and it fires even while the interpreter joins other threads)."""
    timer = threading.Timer(after, os._exit, (code,))
    timer.daemon = True
    timer.start()


def make_app(settings: Settings, client: Any, gpus: Any = None, freeze_gc: bool = False) -> QwenApp:
    """freeze_gc: the console process's own setting (the CLI and the benchmarks); not in tests, where
    many apps share one process and frozen objects are never collected."""
    return QwenApp(settings, client, gpus, freeze_gc)
