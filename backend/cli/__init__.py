"""`qwen-tui` command line: the console with no subcommand, and a headless command per capability.

Global options (--config, --demo, --profile, --set) go before the subcommand and are accepted after it too.
Exit codes: 0 ok, 1 the thing asked about is not ok (not fitting, failed, not running), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys

from backend.settings import ConfigError, Settings, load


def _global_options(p: argparse.ArgumentParser, sub: bool) -> None:
    kw = {"default": argparse.SUPPRESS} if sub else {}
    p.add_argument("--config", metavar="PATH", help="settings file (default: $QWEN_TUI_CONFIG, "
                   "./config.toml, then the XDG config dir)", **kw)
    p.add_argument("--demo", action="store_true", help="serve the built-in tiny model on vLLM's CPU "
                   "build (no GPU, no download)", **kw)
    p.add_argument("--profile", metavar="NAME", help="workload profile: [profiles.NAME] of config.toml over "
                   "[server] (built in: chat 8K/8 seqs, long 32K/2, batch 4K/32; `qwen-tui profiles` lists them)",
                   **kw)
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", dest="overrides",
                   help="override a setting for this run (repeatable)", **({"default": argparse.SUPPRESS}
                                                                           if sub else {"default": []}))


def build_parser() -> argparse.ArgumentParser:
    from backend.cli import commands

    parser = argparse.ArgumentParser(prog="qwen-tui", description="Console for vLLM serving Qwen2.5.")
    _global_options(parser, sub=False)
    subs = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (func, help_text, add_args) in commands.COMMANDS.items():
        sp = subs.add_parser(name, help=help_text, description=help_text)
        _global_options(sp, sub=True)
        add_args(sp)
        sp.set_defaults(func=func)
    return parser


def load_settings(args: argparse.Namespace) -> Settings:
    return load(config=args.config, demo=args.demo, overrides=args.overrides,
                profile=getattr(args, "profile", None))


def main(argv: list[str] | None = None, console=None) -> int:
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
