"""Where qwen-tui keeps things (XDG dirs via platformdirs; QWEN_TUI_HOME overrides all, for tests)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "qwen-tui"


def _home() -> Path | None:
    h = os.environ.get("QWEN_TUI_HOME")
    return Path(h) if h else None


def config_dir() -> Path:
    h = _home()
    return h / "config" if h else Path(platformdirs.user_config_dir(APP))


def cache_dir() -> Path:
    h = _home()
    return h / "cache" if h else Path(platformdirs.user_cache_dir(APP))


def state_dir() -> Path:
    h = _home()
    return h / "state" if h else Path(platformdirs.user_state_dir(APP))


def data_dir() -> Path:
    """Results and models kept for the user (XDG data dir): `qwen-tui pull` models unless told
    otherwise, load-test sweeps under sweeps/."""
    h = _home()
    return h / "data" if h else Path(platformdirs.user_data_dir(APP))
