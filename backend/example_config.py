"""The example config.toml (the repo's, every setting commented) and `qwen-tui init-config`, which
writes it to the user config dir, so that an install from a wheel (pip, pipx, uv tool) has one to edit.

The repo keeps config.toml at its top; a wheel carries a copy as backend/_example/config.toml
(pyproject.toml's [tool.setuptools.package-dir])."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from backend import paths
from backend.errors import ConfigError

HERE = Path(__file__).resolve().parent
CANDIDATES = (HERE / "_example" / "config.toml",  # installed from a wheel
              HERE.parent / "config.toml")  # a clone (or an editable install of one)


def example_path() -> Path:
    for p in CANDIDATES:
        if p.is_file():
            return p
    raise ConfigError("no example config.toml in this install (looked at "
                      + ", ".join(str(p) for p in CANDIDATES) + ")")


def write_example(dest: Path | None = None) -> Path:
    """Copy the example to `dest` (default: the config dir's config.toml), never over a file: the
    user's settings are theirs. Written whole or not at all (a temp file, then a link)."""
    dest = Path(dest or paths.config_dir() / "config.toml").expanduser()
    text = example_path().read_text(encoding="utf-8")
    if dest.is_dir():
        raise ConfigError(f"{dest} is a directory: give a file path")
    if dest.exists():
        raise ConfigError(f"{dest} exists: not overwritten (edit it, or move it away first)")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        try:
            os.link(tmp, dest)  # fails if dest appeared meanwhile: never replaces it
        except FileExistsError:
            raise ConfigError(f"{dest} exists: not overwritten (edit it, or move it away first)") from None
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot write {dest}: {e.strerror or e}") from None
    return dest


def init_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--file", metavar="PATH", help="where to write it (default: the config dir's config.toml)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def cmd_init_config(args: argparse.Namespace) -> int:
    dest = write_example(Path(args.file) if args.file else None)
    if args.json:
        print(json.dumps({"written": str(dest), "example": str(example_path())}, indent=2))
    else:
        print(f"wrote the example config to {dest}\nedit it there; qwen-tui reads it when there is no "
              "./config.toml (or pass --config FILE)")
    return 0
