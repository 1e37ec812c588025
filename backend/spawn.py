"""Every child command line of qwen-tui, written here and nowhere else.

A run's `Origin` is how it was configured: the config file, --demo, --profile and the --set
overrides. A child that must read the same settings (the detached supervisor, a detached pull, the
router's supervisor, the systemd unit's server) gets them as the global options written by
`Origin.argv()`; nothing else re-encodes a run's options as argv, and nothing edits argv: a
different origin (another profile, the old server's settings for a restore) is a new `Origin`.
tests/unit/test_spawn.py fails when a module other than this one builds a `-m backend.cli` line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.record import record, replace

if TYPE_CHECKING:
    from backend.settings import Settings

MODULE = "backend.cli"
KEY_OVERRIDE = "server.api_key"  # a --set of it never goes into a child's argv (`ps` shows argv to every user)


@record(frozen=True)
class Origin:
    """How a run was configured; `argv()` gives the global options that load the same settings."""

    config: str | None = None  # the settings file; None: the child looks for one as this run did
    demo: bool = False
    profile: str | None = None
    overrides: tuple[str, ...] = ()  # the --set texts, in order (a later one wins)

    def argv(self) -> list[str]:
        out: list[str] = []
        if self.config:
            out += ["--config", self.config]
        if self.demo:
            out.append("--demo")
        if self.profile:
            out += ["--profile", self.profile]
        for text in self.overrides:
            out += ["--set", text]
        return out

    def with_profile(self, name: str | None) -> Origin:
        """This origin with profile `name` in place of the active one (None: no profile)."""
        return replace(self, profile=name or None)

    def with_overrides(self, more: Iterable[str]) -> Origin:
        """This origin with `more` --set texts after its own (they win)."""
        return replace(self, overrides=(*self.overrides, *more))

    def without_key(self) -> tuple[Origin, str | None]:
        """This origin without any `--set server.api_key=...`, and the key it carried (the last one)."""
        kept, key = [], None
        for text in self.overrides:
            name, _, value = text.partition("=")
            if name.strip() == KEY_OVERRIDE:
                key = value.strip().strip("'\"")
            else:
                kept.append(text)
        return replace(self, overrides=tuple(kept)), key

    def load(self) -> Settings:
        """The settings this origin gives (raises ConfigError as backend.settings.load does)."""
        from backend.settings import load  # start-up: only when settings are loaded again

        return load(config=self.config, demo=self.demo, overrides=list(self.overrides), profile=self.profile)


def origin_of(settings: Settings) -> Origin:
    """The origin of these settings: the file they were read from (absolute, so a child in another
    directory reads the same one), --demo, the profile and the --set overrides."""
    source = getattr(settings, "source", None)
    return Origin(config=str(Path(source).expanduser().resolve()) if source else None,
                  demo=bool(getattr(settings, "demo", False)), profile=getattr(settings, "profile", None) or None,
                  overrides=tuple(getattr(settings, "overrides", None) or ()))


def origin_of_options(args: Any) -> Origin:
    """The origin from parsed global options (an argparse namespace of backend/cli/options.py's
    global_options: config, demo, profile, overrides): the inverse of `Origin.argv()`."""
    config = getattr(args, "config", None)
    return Origin(config=str(Path(config).expanduser().resolve()) if config else None,
                  demo=bool(getattr(args, "demo", False)), profile=getattr(args, "profile", None) or None,
                  overrides=tuple(getattr(args, "overrides", None) or ()))


def restoring(origin: Origin, server: Mapping[str, Any]) -> Origin:
    """`origin` with a --set for each recorded server setting (the state file's snapshot) after its own,
    so the old server starts as it ran; a hidden key, None and empty values are left out (the config
    file's hold)."""
    import json  # start-up: only for a restart that restores the old server

    more: list[str] = []
    for key, value in server.items():
        if key == "env" and isinstance(value, dict):
            more += [f"server.env.{k}={v}" for k, v in value.items()]
        elif value is not None and value != "<hidden>" and isinstance(value, (str, int, float, bool, list)):
            more.append(f"server.{key}={json.dumps(value)}")
    return origin.with_overrides(more)


def cli_prefix() -> list[str]:
    """This interpreter's qwen-tui: `python -m backend.cli` (the console script may not be on PATH)."""
    return [sys.executable, "-m", MODULE]


def command(origin: Origin | None, *args: str, prefix: Iterable[str] | None = None) -> list[str]:
    """`qwen-tui [global options] ARGS` as argv; `prefix` replaces this interpreter's qwen-tui
    (a cluster box's own `qwen_tui`)."""
    base = list(prefix) if prefix is not None else cli_prefix()
    return [*base, *(origin.argv() if origin is not None else []), *args]


@record(frozen=True)
class Child:
    """A child to start: its argv and what its environment adds (a key never rides in argv)."""

    argv: list[str]
    env: dict[str, str]

    def environ(self) -> dict[str, str]:
        """This process's environment with the child's additions (an inherited value wins)."""
        return {**self.env, **os.environ} if self.env else dict(os.environ)


def supervisor(origin: Origin, restart: str | None = None, allow_orphans: bool = False) -> Child:
    """The detached `qwen-tui serve --quiet`; a --set key travels as $QWEN_TUI_API_KEY."""
    kept, key = origin.without_key()
    argv = command(kept, "serve", "--quiet")
    if allow_orphans:
        argv.append("--allow-orphans")
    if restart:
        argv += ["--restart", restart]
    return Child(argv, {"QWEN_TUI_API_KEY": key} if key is not None else {})


def systemd_serve(origin: Origin) -> tuple[list[str], bool]:
    """The systemd unit's ExecStart argv, and whether a --set key was left out of it."""
    kept, key = origin.without_key()
    return command(kept, "serve", "--quiet", "--restart", "never"), key is not None


def router_supervisor(origin: Origin) -> list[str]:
    """The detached `qwen-tui router serve --quiet`."""
    return command(origin, "router", "serve", "--quiet")


@record(frozen=True)
class PullJob:
    """What a pull child is asked to do (the options of `qwen-tui pull`)."""

    repo_id: str
    source: str | None = None
    workers: int | None = None
    revision: str | None = None
    local_dir: str | None = None
    endpoint: str | None = None
    set_model: bool = False
    json: bool = False
    watch_parent: int | None = None  # the console it stops with (None: it outlives its starter)

    def args(self) -> list[str]:
        out = ["pull", self.repo_id]
        for flag, value in (("--source", self.source), ("--workers", self.workers), ("--revision", self.revision),
                            ("--local-dir", self.local_dir), ("--endpoint", self.endpoint),
                            ("--watch-parent", self.watch_parent)):
            if value is not None and value != "":
                out += [flag, str(value)]
        return out + (["--set-model"] if self.set_model else []) + (["--json"] if self.json else [])


def pull(origin: Origin | None, job: PullJob) -> list[str]:
    """A pull in its own process (`qwen-tui pull ...`)."""
    return command(origin, *job.args())


def is_cli_argv(argv: list[str]) -> list[str] | None:
    """What follows qwen-tui in a qwen-tui command line (the console script or `python -m backend.cli`),
    or None for any other command line."""
    for i, arg in enumerate(argv):
        if arg == "-m" and argv[i + 1: i + 2] == [MODULE]:
            return argv[i + 2:]
        if os.path.basename(arg) == "qwen-tui":
            return argv[i + 1:]
    return None
