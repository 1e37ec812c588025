"""One run's settings: the checked values of each section (plain dicts: the state file's snapshot,
the settings screen and the launch argv walk them) and, read from them, the frozen typed sections
that every other reader uses (`settings.server_cfg.port`)."""

from __future__ import annotations

import copy
from dataclasses import field
from pathlib import Path
from typing import Any, TypeVar

from backend.record import record
from backend.settings.keyfile import resolve_key
from backend.settings.spec import (
    ChatSettings,
    ConsoleSettings,
    PlannerSettings,
    Section,
    ServerSettings,
    from_values,
)

T = TypeVar("T", bound=Section)


@record
class Settings:
    server: dict[str, Any]
    console: dict[str, Any]
    planner: dict[str, Any]
    chat: dict[str, Any]
    source: Path | None = None
    demo: bool = False
    overrides: list[str] = field(default_factory=list)
    profile: str | None = None  # the active workload profile ([profiles.NAME] over [server])
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)  # every known profile
    # section name -> (the values it was built from, the typed section): built again when they change
    _typed: dict[str, tuple[dict[str, Any], Any]] = field(default_factory=dict, init=False, repr=False,
                                                          compare=False)

    def _section(self, name: str, cls: type[T]) -> T:
        values = getattr(self, name)
        hit = self._typed.get(name)
        if hit is not None and hit[0] == values:
            return hit[1]  # type: ignore[no-any-return]
        section = from_values(cls, values)
        self._typed[name] = (copy.deepcopy(values), section)
        return section

    @property
    def server_cfg(self) -> ServerSettings:
        return self._section("server", ServerSettings)

    @property
    def console_cfg(self) -> ConsoleSettings:
        return self._section("console", ConsoleSettings)

    @property
    def planner_cfg(self) -> PlannerSettings:
        return self._section("planner", PlannerSettings)

    @property
    def chat_cfg(self) -> ChatSettings:
        return self._section("chat", ChatSettings)

    @property
    def env(self) -> dict[str, str]:
        return dict(self.server_cfg.env)

    @property
    def extra_args(self) -> list[str]:
        return list(self.server_cfg.extra_args)

    @property
    def served_name(self) -> str:
        srv = self.server_cfg
        name = srv.served_model_name
        if isinstance(name, tuple):
            return str(name[0]) if name else srv.model
        return str(name or srv.model)

    @property
    def base_url(self) -> str:
        srv = self.server_cfg
        host = srv.host or "127.0.0.1"
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{srv.port}"

    @property
    def api_key(self) -> str | None:
        """The key the console sends ($QWEN_TUI_API_KEY, server.api_key_file, server.api_key)."""
        srv = self.server_cfg
        return resolve_key(srv.api_key_file, srv.api_key, strict=False)

    def snapshot(self) -> dict[str, Any]:
        """The settings as recorded in the state file: any key shown as <hidden>."""
        server = copy.deepcopy(self.server)
        if server.get("api_key"):
            server["api_key"] = "<hidden>"
        return {"server": server, "console": dict(self.console),
                "planner": dict(self.planner), "chat": dict(self.chat), "demo": self.demo,
                "profile": self.profile}
