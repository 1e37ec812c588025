"""ConsoleApp: what the console's screens and widgets use of their app, declared below them.

QwenApp (tui/app.py) is the one app; it imports every screen. Typing `self.app` as QwenApp (tui/node.py)
made each screen name the module that imports it: a circle, if only for the type checker. This base
holds the part they use (settings, client, GPUs, the main screen, reload, quit), so they name it instead.
"""

from __future__ import annotations

from typing import Any

from textual.app import App

from backend.server.status import ServerState
from backend.settings import Settings


class ConsoleApp(App[int]):  # exit(0): the result is the exit code
    # --watch: every panel, no key that changes the server (tui/screens/events.py)
    watching = False
    settings: Settings
    client: Any  # backend.server.client's SupervisorClient (tests give a scripted one)
    gpus: Any  # a backend.gpu.GpuMonitor (or a test double); None: no GPU panels
    main_screen: Any  # the MainScreen (naming its type would import the screens again)

    def reload_settings(self, settings: Settings | None = None) -> Settings:
        """Adopt settings saved from the console (or read them again)."""
        raise NotImplementedError

    def request_quit(self, state: ServerState | str | None = None) -> None:
        """Ask how to leave (or leave, by the quit policy)."""
        raise NotImplementedError

    def first_frame_shown(self) -> None:
        """The main screen's first frame is out."""
        raise NotImplementedError
