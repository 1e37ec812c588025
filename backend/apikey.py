"""The server's API key: where it comes from, where it may travel, and where it never appears.

Sources, first found wins: `$QWEN_TUI_API_KEY`, the file `server.api_key_file` (mode 0600;
`qwen-tui gen-key` writes one), `server.api_key` in config.toml, then a `$VLLM_API_KEY` the server
would inherit anyway. The key reaches vLLM only as
`VLLM_API_KEY` in the child's environment (never argv: every local user can read argv in `ps`), and
the console's own requests send it as a bearer token. It is shown as `<hidden>` everywhere else:
print-command (unless --show-secrets), the state file, status, errors and the settings screen.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from backend import paths
from backend.errors import ConfigError
from backend.settings import Settings

# the key as the settings resolve it (below them, so that Settings.api_key needs nothing from here)
from backend.settings.keyfile import CHILD_VAR, ENV_VAR, read_key_file, resolve_key

__all__ = ["CHILD_VAR", "ENV_VAR", "read_key_file"]
HIDDEN = "<hidden>"
LOOPBACK = ("127.0.0.1", "localhost", "::1", "127.0.1.1")


def default_key_file() -> Path:
    return paths.config_dir() / "api_key"


def resolve(settings: Settings, strict: bool = True) -> str | None:
    """The key the server is started with and the console sends, or None (no key).
    strict=False: an unreadable key file counts as no key (for clients; the launch is strict)."""
    srv = settings.server_cfg
    return resolve_key(srv.api_key_file, srv.api_key, strict)


def source(settings: Settings) -> str | None:
    """Where the key comes from, in words (never the key)."""
    if os.environ.get(ENV_VAR):
        return f"${ENV_VAR}"
    srv = settings.server_cfg
    if srv.api_key_file:
        return f"server.api_key_file ({srv.api_key_file})"
    if srv.api_key:
        return "server.api_key" + (" (--set)" if _from_set(settings) else f" in {settings.source}")
    if os.environ.get(CHILD_VAR):
        return f"${CHILD_VAR} (inherited by the server)"
    return None


def _from_set(settings: Settings) -> bool:
    return any(o.split("=", 1)[0].strip() == "server.api_key" for o in settings.overrides)


def _readable_by_others(path: Path) -> int | None:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None
    return mode if mode & 0o077 else None


def warnings(settings: Settings) -> list[str]:
    """Where the key is less private than it should be: a key file or a config holding a key that
    others may read, or a key typed on the command line."""
    out = []
    path = settings.server_cfg.api_key_file
    if path and not os.environ.get(ENV_VAR):
        mode = _readable_by_others(Path(path).expanduser())
        if mode is not None:
            out.append(f"the key file {path} is readable by others (mode {mode:04o}): chmod 600 {path}")
    if settings.server_cfg.api_key and settings.source and not _from_set(settings):
        mode = _readable_by_others(Path(settings.source))
        if mode is not None:
            out.append(f"{settings.source} holds server.api_key and is readable by others (mode {mode:04o}): "
                       f"chmod 600 {settings.source}, or move the key to server.api_key_file")
    if _from_set(settings):
        out.append("--set server.api_key puts the key in your shell history and in `ps`: use "
                   f"server.api_key_file (qwen-tui gen-key) or ${ENV_VAR}")
    return out


def is_loopback(host: Any) -> bool:
    h = str(host or "").strip().strip("[]")
    return h in LOOPBACK or h.startswith("127.")


def exposure(settings: Settings) -> str | None:
    """A warning when the server would be reachable from the network without a key."""
    host = settings.server_cfg.host
    if is_loopback(host):
        return None
    if resolve(settings, strict=False):
        return None
    return (f"server.host = {host!r} is reachable from the network without a key: anyone who can reach "
            f"port {settings.server_cfg.port} can use the GPUs and read every prompt. Set a key "
            f"(qwen-tui gen-key, then server.api_key_file) or bind to 127.0.0.1")


def redact(text: str, key: str | None) -> str:
    """`text` with the key replaced by <hidden> (for anything shown or written)."""
    if key and len(key) >= 4 and text:
        return text.replace(key, HIDDEN)
    return text


def redact_settings(snapshot: dict[str, Any]) -> dict[str, Any]:
    server = dict(snapshot.get("server") or {})
    if server.get("api_key"):
        server["api_key"] = HIDDEN
    return dict(snapshot, server=server)


def gen_key(path: Path | None = None, force: bool = False) -> Path:
    """Write a new random key (256 bits, URL-safe) to `path`, mode 0600; never over an existing
    file unless `force`."""
    path = Path(path or default_key_file()).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise ConfigError(f"{path} exists: not overwritten (use --force to replace the key)") from None
    import secrets  # start-up: loaded on first use (with hashlib and OpenSSL), not with the console

    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(secrets.token_urlsafe(32) + "\n")
    return path
