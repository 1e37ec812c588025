"""The server's API key as the settings resolve it: $QWEN_TUI_API_KEY, server.api_key_file,
server.api_key, then an inherited $VLLM_API_KEY. Here, below Settings, so that `Settings.api_key`
needs nothing above it; backend/apikey.py (where the key may travel, warnings) builds on this."""

from __future__ import annotations

import os
from pathlib import Path

from backend.errors import ConfigError

ENV_VAR = "QWEN_TUI_API_KEY"
CHILD_VAR = "VLLM_API_KEY"


def read_key_file(path: str | Path) -> str:
    p = Path(path).expanduser()
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"server.api_key_file: cannot read {p}: {e.strerror}") from None
    try:
        key = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"server.api_key_file: {p} is not UTF-8 text") from None
    if not key or any(c.isspace() for c in key):
        raise ConfigError(f"server.api_key_file: {p} must hold one key on one line (no spaces)")
    return key


def resolve_key(api_key_file: str | None, api_key: str | None, strict: bool = True) -> str | None:
    """The key the server is started with and the console sends, or None (no key).
    strict=False: an unreadable key file counts as no key (for clients; the launch is strict)."""
    key = os.environ.get(ENV_VAR)
    if key:
        return key.strip()
    if api_key_file:
        try:
            return read_key_file(api_key_file)
        except ConfigError:
            if strict:
                raise
            return None
    return api_key or os.environ.get(CHILD_VAR) or None
