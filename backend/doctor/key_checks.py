"""Check 13: who can reach the server, and where its API key lives (never the key itself)."""

from __future__ import annotations

from backend import apikey
from backend.doctor.context import Check, Context
from backend.errors import ConfigError


def check_security(ctx: Context) -> Check:
    s = ctx.settings
    try:
        apikey.resolve(s)
    except ConfigError as e:
        return Check("security", "fail", str(e), "qwen-tui gen-key --file PATH, then server.api_key_file = PATH")
    exposed = apikey.exposure(s)
    if exposed:
        return Check("security", "warn", exposed, "qwen-tui gen-key, then in config.toml [server] "
                     "api_key_file = \"<the path it prints>\"; or --set server.host=127.0.0.1")
    warns = apikey.warnings(s)
    if warns:
        return Check("security", "warn", "; ".join(warns), "chmod 600 the file named")
    src = apikey.source(s)
    host = s.server_cfg.host
    return Check("security", "ok", f"API key from {src}; bound to {host}" if src
                 else f"bound to {host} only (no key needed on loopback)")
