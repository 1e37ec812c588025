"""The `qwen-tui` entry point: headless subcommands from backend.cli, the console without one."""

from __future__ import annotations

import sys


def run_console(args) -> int:
    from backend.cli import load_settings
    from backend.cli.commands import global_argv
    from backend.client import ServerClient
    from tui.app import make_app

    from backend.gpu import GpuMonitor

    settings = load_settings(args)
    gpus = GpuMonitor()
    try:
        app = make_app(settings, ServerClient(global_argv(args)), gpus)
        app.run()
    finally:
        gpus.shutdown()
    return app.return_code or 0


def main(argv: list[str] | None = None) -> int:
    from backend.cli import main as cli_main

    return cli_main(argv, console=run_console)


if __name__ == "__main__":
    sys.exit(main())
