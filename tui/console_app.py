"""ConsoleApp: what the console's screens and widgets use of their app, declared below them.

QwenApp (tui/app.py) is the one app; it imports every screen. Typing `self.app` as QwenApp (tui/node.py)
made each screen name the module that imports it: a circle, if only for the type checker. This base
holds the part they use (settings, client, GPUs, the main screen, reload, quit), so they name it instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from textual.app import App

from backend.server.status import ServerState
from backend.settings import Settings

if TYPE_CHECKING:  # types only: the client pulls in httpx, the monitor pynvml (start-up)
    from backend.gpu import GpuMonitor
    from backend.server.client import ServerClient


class MainScreenHooks(Protocol):
    """What other screens call on the main screen (naming MainScreen would import the screens again)."""

    def _settings_closed(self, result: str | None) -> None: ...


# MainScreen actions that change the server or its settings: none of them in watch mode
WATCH_BLOCKED = frozenset({"start", "stop", "restart", "settings", "profiles", "sleep_wake", "cluster", "pull"})


class ConsoleApp(App[int]):  # exit(0): the result is the exit code
    # --watch: every panel, no key that changes the server (WATCH_BLOCKED)
    watching = False
    settings: Settings
    client: ServerClient  # tests give a scripted one of the same shape
    gpus: GpuMonitor | None  # None: no GPU panels (tests give a double of the same shape)
    main_screen: MainScreenHooks | None  # None until the main screen is made

    def reload_settings(self, settings: Settings | None = None) -> Settings:
        """Adopt settings saved from the console (or read them again)."""
        raise NotImplementedError

    def request_quit(self, state: ServerState | str | None = None) -> None:
        """Ask how to leave (or leave, by the quit policy)."""
        raise NotImplementedError

    def first_frame_shown(self) -> None:
        """The main screen's first frame is out."""
        raise NotImplementedError
