"""QwenApp and its factory: the CLI and the tests build the console the same way."""

from __future__ import annotations

import signal
from typing import Any

from textual.app import App

from backend.settings import Settings
from tui.screens.main import MainScreen
from tui.screens.quit import QuitScreen
from tui.themes import register_themes

RUNNING = ("starting", "ready", "backoff", "sleeping")


class QwenApp(App):
    TITLE = "qwen-tui"

    def __init__(self, settings: Settings, client: Any, gpus: Any = None) -> None:
        super().__init__()
        self.settings = settings
        self.client = client
        self.gpus = gpus  # a backend.gpu.GpuMonitor (or a test double); None: no GPU panels
        self.quit_choice: str | None = None

    def on_mount(self) -> None:
        register_themes(self, self.settings.console["theme"])
        self.push_screen(MainScreen())
        loop = __import__("asyncio").get_running_loop()
        # Textual does not handle these: an SSH drop (HUP) or a kill (TERM) exits cleanly and
        # leaves the server running; it lives in its own supervisor process.
        for sig in (signal.SIGHUP, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, lambda: self.exit(0))
            except (RuntimeError, ValueError, NotImplementedError):  # not the main thread (tests)
                pass

    def reload_settings(self, settings: Settings | None = None) -> Settings:
        """Adopt settings saved from the console (or read them again: same file, --demo, --set)."""
        from backend.setting_rows import reload

        new = settings if settings is not None else reload(self.settings)
        theme = new.console["theme"]
        if theme != self.settings.console["theme"] and theme in self.available_themes:
            self.theme = theme
        self.settings = new
        return new

    def request_quit(self, state: str) -> None:
        policy = self.settings.console["on_exit"]
        if state not in RUNNING or policy == "keep":
            self.quit_choice = "keep"
            self.exit(0)
        elif policy == "stop":
            self._stop_and_exit()
        else:
            self.push_screen(QuitScreen(), self._quit_chosen)

    def _quit_chosen(self, choice: str | None) -> None:
        if choice == "keep":
            self.quit_choice = "keep"
            self.exit(0)
        elif choice == "stop":
            self._stop_and_exit()

    def _stop_and_exit(self) -> None:
        self.quit_choice = "stop"
        self.notify("stopping the server…")
        self.run_worker(self._stop_worker, group="quit", exclusive=True, exit_on_error=False)

    async def _stop_worker(self) -> None:
        import asyncio

        await asyncio.to_thread(self.client.stop)
        self.exit(0)


def make_app(settings: Settings, client: Any, gpus: Any = None) -> QwenApp:
    return QwenApp(settings, client, gpus)
