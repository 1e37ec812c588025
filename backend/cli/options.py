"""The global options (--config, --demo, --set) and the settings they give: shared by the parser
(backend/cli/__init__.py) and the subcommands (commands.py), neither of which imports the other for them."""

from __future__ import annotations

import argparse
from typing import Any

from backend.settings import Settings, load


def global_options(p: argparse.ArgumentParser, sub: bool) -> None:
    kw: dict[str, Any] = {"default": argparse.SUPPRESS} if sub else {}
    p.add_argument("--config", metavar="PATH", help="settings file (default: $QWEN_TUI_CONFIG, "
                   "./config.toml, then the XDG config dir)", **kw)
    p.add_argument("--demo", action="store_true", help="serve the built-in tiny model on vLLM's CPU "
                   "build (no GPU, no download)", **kw)
    p.add_argument("--profile", metavar="NAME", help="workload profile: [profiles.NAME] of config.toml over "
                   "[server] (built in: chat 8K/8 seqs, long 32K/2, batch 4K/32; `qwen-tui profiles` lists them)",
                   **kw)
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", dest="overrides",
                   help="override a setting for this run (repeatable)", **(kw or {"default": []}))
    if not sub:  # the console's own: look, don't touch (never passed on to a child process)
        p.add_argument("--watch", action="store_true", help="the console with every panel and no key that "
                       "starts, stops, restarts, sleeps, kills or saves settings")


def load_settings(args: argparse.Namespace) -> Settings:
    from backend.errors import ConfigError  # the message for an empty value (exit 2)

    for flag, value in (("--config", args.config), ("--profile", getattr(args, "profile", None))):
        if value is not None and not str(value).strip():  # "" from a shell variable that was not set
            raise ConfigError(f"{flag} needs a value, got an empty one")
    return load(config=args.config, demo=args.demo, overrides=args.overrides,
                profile=getattr(args, "profile", None))


def positive_int(text: str) -> int:
    """An argparse type: a whole number of 1 or more (argparse says why and exits 2 otherwise)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {n}")
    return n
