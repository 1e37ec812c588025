"""`qwen-tui` command line: the console with no subcommand, and a headless command per capability.

Global options (--config, --demo, --profile, --set) go before the subcommand and are accepted after it too.
Exit codes: 0 ok, 1 the thing asked about is not ok (not fitting, failed, not running), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from backend.cli.options import global_options, load_settings
from backend.errors import ConfigError

__all__ = ["build_parser", "console_args", "load_settings", "main"]


def build_parser() -> argparse.ArgumentParser:
    from backend.cli import commands  # start-up: the subcommands load after parsing

    parser = argparse.ArgumentParser(prog="qwen-tui", description="Console for vLLM serving Qwen2.5.")
    global_options(parser, sub=False)
    subs = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (func, help_text, add_args) in commands.COMMANDS.items():
        sp = subs.add_parser(name, help=help_text, description=help_text)
        global_options(sp, sub=True)
        add_args(sp)
        sp.set_defaults(func=func)
    return parser


class _NotOnlyGlobals(Exception):
    """The argv is not the global options alone: the full parser decides (and words any error)."""


class _GlobalsParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _NotOnlyGlobals(message)


def console_args(argv: list[str] | None = None) -> argparse.Namespace | None:
    """The arguments of a start with no subcommand (the console), parsed without building the full
    parser, whose subcommands import the cluster's and the pull's code (httpx with them: 0.15-0.35 s
    of the console's first frame here); None for anything else (a subcommand, -h, a bad option),
    which the full parser handles as before. Same Namespace as the full parser gives for these."""
    parser = _GlobalsParser(prog="qwen-tui", add_help=False)
    global_options(parser, sub=False)
    try:
        args, rest = parser.parse_known_args(argv)
    except _NotOnlyGlobals:
        return None
    if rest:
        return None
    args.command = None
    return args


def main(argv: list[str] | None = None, console: Callable[[argparse.Namespace], int] | None = None) -> int:
    """Run a subcommand. With none, call `console(args)` (the TUI passes its entry point, so that
    backend/ never imports the UI); headless use without a console prints the help."""
    args = console_args(argv) if console is not None else None
    if args is None:
        parser = build_parser()
        args = parser.parse_args(argv)
    try:
        if getattr(args, "func", None) is None:
            if console is None:
                parser.print_help()
                return 2
            return int(console(args) or 0)
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"qwen-tui: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
