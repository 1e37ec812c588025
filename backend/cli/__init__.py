"""`qwen-tui` command line: the console with no subcommand, and a headless command per capability.

Global options (--config, --demo, --profile, --set) go before the subcommand and are accepted after it too.
Exit codes: 0 ok, 1 the thing asked about is not ok (not fitting, failed, not running), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from backend.cli.options import global_options, load_settings
from backend.errors import ConfigError

__all__ = ["build_parser", "load_settings", "main"]


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


def main(argv: list[str] | None = None, console: Callable[[argparse.Namespace], int] | None = None) -> int:
    """Run a subcommand. With none, call `console(args)` (the TUI passes its entry point, so that
    backend/ never imports the UI); headless use without a console prints the help."""
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
