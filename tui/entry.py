"""The `qwen-tui` entry point: headless subcommands from backend.cli, the console without one."""

from __future__ import annotations

import gc
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse


def run_console(args: argparse.Namespace) -> int:
    # start-up: the cyclic GC stays off until the console's first frame (the app turns it back on
    # there, freezing what the start built): its ~175 collections on the way cost ~40-50 ms
    gc.disable()
    try:
        return _run(args)
    finally:
        gc.enable()  # never left off past the console, whatever happened before its first frame


def _run(args: argparse.Namespace) -> int:
    # start-up: `qwen-tui status` and the other subcommands never load the console
    from backend.cli import load_settings
    from backend.gpu import GpuMonitor
    from backend.server.client import ServerClient
    from backend.spawn import origin_of
    from tui.app import make_app, start_exit_watchdog

    settings = load_settings(args)
    gpus = GpuMonitor(start=False)  # NVML opens in a thread after the first frame (tui/screens/main.py)
    try:
        app = make_app(settings, ServerClient(origin_of(settings)), gpus, freeze_gc=True)
        app.watching = bool(getattr(args, "watch", False))
        if app.watching:
            problem = watch_problem()
            if problem:
                print(f"qwen-tui --watch: {problem}", file=sys.stderr)
                return 1
            from backend.server import statefile  # start-up: only for --watch

            statefile.READ_ONLY["others"] = True  # read a teammate's files; watch mode signals nothing
        app.run()
        app.keep_parsed_css()  # the dialogs' and the chat's, parsed since the first frame
    finally:
        gpus.shutdown()
    # the screen is restored: whatever still runs (a thread in a blocking call) must not keep
    # the process alive past its quit (it used to, for up to a minute, deaf to SIGTERM)
    start_exit_watchdog(app.return_code or 0)
    return app.return_code or 0


def watch_problem() -> str | None:
    """Why this state dir cannot be watched (its files are not readable by this user), or None."""
    import os  # start-up: only for --watch

    from backend import paths  # start-up: only for --watch

    where = paths.state_dir()
    for path in (where, where / "server.json", where / "events.jsonl", where / "logs"):
        if path.exists() and not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
            return (f"cannot read {path}: permission denied (it belongs to uid {path.stat().st_uid}); "
                    "ask its owner to let you read it (chmod g+rX), or watch your own state dir")
    return None


def main(argv: list[str] | None = None) -> int:
    # start-up: `qwen-tui status` and the other subcommands never load the console
    from backend.cli import main as cli_main

    return cli_main(argv, console=run_console)


if __name__ == "__main__":
    sys.exit(main())
