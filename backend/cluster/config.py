"""`[cluster]` and `[[cluster.box]]`: the boxes, how to reach each one, and the router in front.

Optional: a config file without `[cluster]` is today's single box and nothing here runs. Read from
the same file as the rest of the settings (settings.source); a bad value is a ConfigError naming
file:line, never a traceback.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from backend.errors import ConfigError
from backend.settings import Settings, read_toml_text
from backend.spawn import cli_prefix

ROUTERS = ("vllm-router", "none")
TRANSPORTS = ("local", "ssh")
POLICIES = ("cache_aware", "round_robin", "consistent_hash", "power_of_two", "sticky_least_loaded",
            "kv_aware", "random")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")

# key: (type, default, help, (low, high) or choices)
CLUSTER_KEYS: dict[str, tuple[Any, Any, str, Any]] = {
    "router": (str, "vllm-router", "the load balancer in front of the boxes ('none': boxes only)", ROUTERS),
    "router_url": (str, "http://127.0.0.1:30000", "where the router listens (loopback or a private address)", None),
    "router_metrics_url": (str, "http://127.0.0.1:29000/metrics", "the router's Prometheus endpoint", None),
    "router_policy": (str, "cache_aware", "vllm-router --policy (cache_aware keeps a conversation on the box "
                      "holding its prefix cache)", POLICIES),
    "router_bin": (str, "", "the vllm-router executable ('' = next to this Python, then $PATH)", None),
    "health_interval_s": (int, 5, "vllm-router --health-check-interval-secs", (1, 3600)),
    "health_failure_threshold": (int, 2, "vllm-router --health-failure-threshold", (1, 100)),
    "drain_timeout_s": ((int, float), 300, "a drain waits this long for the box's running requests to reach 0",
                        (0, 86400)),
    "ready_timeout_s": ((int, float), 900, "a box's serve waits this long for READY", (1, 86400)),
    "command_timeout_s": ((int, float), 30, "a box's status/stop command may take this long", (1, 3600)),
    "allow_orphans": (bool, False, "start a box even when vLLM/GPU processes no console owns run there "
                      "(its serve --allow-orphans)", None),
}
BOX_KEYS = ("name", "transport", "ssh", "qwen_tui", "config", "api_url", "env")


@dataclass(frozen=True)
class Box:
    name: str
    api_url: str
    transport: str = "local"
    ssh: tuple[str, ...] = ()
    qwen_tui: tuple[str, ...] = ()  # () = this interpreter's qwen-tui (local) or "qwen-tui" (ssh)
    config: str | None = None
    env: tuple[tuple[str, str], ...] = ()  # local transport only: extra environment (QWEN_TUI_HOME)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "transport": self.transport, "api_url": self.api_url,
                "ssh": list(self.ssh), "qwen_tui": list(self.qwen_tui), "config": self.config}


@dataclass(frozen=True)
class Cluster:
    boxes: tuple[Box, ...]
    router: str = "vllm-router"
    router_url: str = "http://127.0.0.1:30000"
    router_metrics_url: str = "http://127.0.0.1:29000/metrics"
    router_policy: str = "cache_aware"
    router_bin: str = ""
    health_interval_s: int = 5
    health_failure_threshold: int = 2
    drain_timeout_s: float = 300
    ready_timeout_s: float = 900
    command_timeout_s: float = 30
    allow_orphans: bool = False
    source: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def box(self, name: str) -> Box:
        for b in self.boxes:
            if b.name == name:
                return b
        raise ConfigError(f"no box named {name!r} in [[cluster.box]] (boxes: "
                          f"{', '.join(b.name for b in self.boxes)})")


def _line_of_box(text: str, index: int) -> int | None:
    seen = -1
    for n, line in enumerate(text.splitlines(), 1):
        if re.match(r"\s*\[\[\s*cluster\s*\.\s*box\s*\]\]", line):
            seen += 1
            if seen == index:
                return n
    return None


def _line_of_key(text: str, key: str) -> int | None:
    inside = False
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("["):
            inside = re.match(r"\[\s*cluster\s*\]", s) is not None
            continue
        if inside and re.match(rf"{re.escape(key)}\s*=", s):
            return n
    return None


def check_url(url: Any, what: str) -> str:
    if not isinstance(url, str) or not url:
        raise ConfigError(f"{what} must be a URL such as http://127.0.0.1:8000")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what} = {url!r} is not an http(s) URL with a host")
    try:
        _ = parts.port
    except ValueError:
        raise ConfigError(f"{what} = {url!r} has a bad port") from None
    return url.rstrip("/")


def bind_problem(url: str) -> str | None:
    """Why the router may not listen where `router_url` says (None = fine): loopback or a private
    address only. 0.0.0.0 would need a key, which vllm-router takes only on its command line (which
    every local user reads in `ps`), so it is refused."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return (f"router_url host {host!r} is not an IP address: give the loopback or private address "
                "the router should bind (e.g. 127.0.0.1 or 10.0.0.11)")
    if ip.is_unspecified:
        return ("router_url binds every interface (0.0.0.0 / ::), reachable from the network without a key: "
                "give a loopback or private address instead")
    if not (ip.is_loopback or ip.is_private):
        return f"router_url {host} is a public address: bind the router to loopback or a private address"
    return None


def _check(key: str, value: Any) -> Any:
    typ, _default, _help, limit = CLUSTER_KEYS[key]
    if (isinstance(value, bool) and typ is not bool) or not isinstance(value, typ):
        names = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise ConfigError(f"cluster.{key} must be {names}, not {type(value).__name__} {value!r}")
    if isinstance(limit, tuple) and limit and isinstance(limit[0], str):
        if value not in limit:
            raise ConfigError(f"cluster.{key} = {value!r}: choose one of {', '.join(limit)}")
    elif isinstance(limit, tuple):
        low, high = limit
        if not low <= value <= high:
            raise ConfigError(f"cluster.{key} = {value!r}: must be {low} to {high}")
    if key in ("router_url", "router_metrics_url"):
        value = check_url(value, f"cluster.{key}")
    return value


def _argv(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        if not value.strip():
            raise ConfigError(f"{what} may not be empty")
        return (value,)
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise ConfigError(f"{what} must be a non-empty list of strings (an argv), e.g. "
                      '["ssh", "-o", "BatchMode=yes", "team@box2"]')


def _box(raw: Any, index: int) -> Box:
    if not isinstance(raw, dict):
        raise ConfigError("each [[cluster.box]] must be a table")
    unknown = sorted(set(raw) - set(BOX_KEYS))
    if unknown:
        raise ConfigError(f"unknown key(s) in [[cluster.box]]: {', '.join(unknown)} (known: {', '.join(BOX_KEYS)})")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ConfigError(f"[[cluster.box]] number {index + 1}: name must be letters, digits, '.', '_' or '-' "
                          f"(got {name!r})")
    transport = raw.get("transport", "local")
    if transport not in TRANSPORTS:
        raise ConfigError(f"box {name}: transport = {transport!r}: choose local or ssh")
    ssh = _argv(raw["ssh"], f"box {name}: ssh") if "ssh" in raw else ()
    if transport == "ssh" and not ssh:
        raise ConfigError(f"box {name}: transport = \"ssh\" needs ssh = [\"ssh\", \"-o\", \"BatchMode=yes\", \"HOST\"]")
    if transport == "local" and ssh:
        raise ConfigError(f"box {name}: ssh is only for transport = \"ssh\"")
    env = raw.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and re.match(r"[A-Za-z_][A-Za-z0-9_]*\Z", k)
                                            and isinstance(v, str) for k, v in env.items()):
        raise ConfigError(f"box {name}: env must be a table of NAME = \"value\" strings")
    if env and transport != "local":
        raise ConfigError(f"box {name}: env is for the local transport; over ssh put it in the remote config")
    qwen_tui = _argv(raw["qwen_tui"], f"box {name}: qwen_tui") if "qwen_tui" in raw else ()
    config = raw.get("config")
    if config is not None and (not isinstance(config, str) or not config):
        raise ConfigError(f"box {name}: config must be a path string")
    if "api_url" not in raw:
        raise ConfigError(f"box {name}: api_url is required (what the router dials, e.g. http://10.0.0.12:8000)")
    api_url = check_url(raw["api_url"], f"box {name}: api_url")
    return Box(name=name, api_url=api_url, transport=transport, ssh=ssh, qwen_tui=qwen_tui,
               config=config, env=tuple(sorted(env.items())))


def from_data(data: dict[str, Any], where: str = "config", text: str = "") -> Cluster | None:
    """The cluster from a parsed config file, None without a [cluster] table."""
    raw = data.get("cluster")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: 'cluster' must be a table like [cluster]")
    values: dict[str, Any] = {k: spec[1] for k, spec in CLUSTER_KEYS.items()}
    for key, value in raw.items():
        if key == "box":
            continue
        if key not in CLUSTER_KEYS:
            line = _line_of_key(text, key)
            raise ConfigError(f"{where}:{line or 1}: unknown key cluster.{key} (known: {', '.join(CLUSTER_KEYS)}, box)")
        try:
            values[key] = _check(key, value)
        except ConfigError as e:
            raise ConfigError(f"{where}:{_line_of_key(text, key) or 1}: {e}") from None
    boxes_raw = raw.get("box", [])
    if not isinstance(boxes_raw, list) or not boxes_raw:
        raise ConfigError(f"{where}: [cluster] needs at least one [[cluster.box]] with name and api_url")
    boxes = []
    for i, b in enumerate(boxes_raw):
        try:
            boxes.append(_box(b, i))
        except ConfigError as e:
            raise ConfigError(f"{where}:{_line_of_box(text, i) or 1}: {e}") from None
    names = [b.name for b in boxes]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{where}: box names must be unique: {', '.join(dup)} appears twice")
    urls = [b.api_url for b in boxes]
    dup = sorted({u for u in urls if urls.count(u) > 1})
    if dup:
        raise ConfigError(f"{where}: two boxes have the same api_url {dup[0]}")
    if values["router"] == "vllm-router":
        why = bind_problem(values["router_url"])
        if why:
            raise ConfigError(f"{where}:{_line_of_key(text, 'router_url') or 1}: {why}")
    return Cluster(boxes=tuple(boxes), **values)


def load_cluster(settings: Settings) -> Cluster | None:
    """The [cluster] of the settings' own file (None: no file, or no [cluster] in it)."""
    if settings.source is None:
        return None
    data, text = read_toml_text(settings.source)
    c = from_data(data, str(settings.source), text)
    return None if c is None else Cluster(**{**c.__dict__, "source": settings.source})


def require(settings: Settings) -> Cluster:
    c = load_cluster(settings)
    if c is None:
        where = settings.source or "no config file was found"
        raise ConfigError(f"no [cluster] in {where}: add [cluster] and one [[cluster.box]] per box "
                          "(see config.toml's commented example), or pass --config FILE")
    return c


def default_qwen_tui(transport: str) -> tuple[str, ...]:
    if transport == "local":
        return tuple(cli_prefix())
    return ("qwen-tui",)
