"""Settings: one typed schema, read with tomllib, saved with tomlkit (comments survive).

`[server]` keys are `vllm serve` flags with dashes turned into underscores. `[server.env]` is the
server's environment, `server.extra_args` is passed through verbatim. `[console]`, `[planner]` and
`[chat]` are the console's own settings.

Lookup order: --config PATH, $QWEN_TUI_CONFIG, ./config.toml, the XDG config dir.
"""

from __future__ import annotations

import copy
import os
import re
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from backend import apikey, paths, profile_overlays
from backend import demo as demo_settings  # the name `demo` is load()'s flag
from backend.errors import ConfigError


@dataclass(frozen=True)
class Key:
    type: type | tuple[type, ...]
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None


_ANY_STR_OR_LIST = (str, list)

# Each [server] key is a vllm serve flag. default None = not passed (vLLM's own default applies).
SERVER: dict[str, Key] = {
    "model": Key(str, "Qwen/Qwen2.5-14B-Instruct", "HF repo id or local directory of the model"),
    "served_model_name": Key(_ANY_STR_OR_LIST, None, "name(s) clients use in the `model` field"),
    "tensor_parallel_size": Key(int, 1, "GPUs the model is split across (heads must divide by it)"),
    "pipeline_parallel_size": Key(int, None, "pipeline stages (PCIe boxes: prefer tensor parallel)"),
    "dtype": Key(str, None, "weights/activations dtype",
                 ("auto", "half", "float16", "bfloat16", "float", "float32")),
    "gpu_memory_utilization": Key(float, None, "fraction of each GPU vLLM may use (0-1)"),
    "kv_cache_memory_bytes": Key(int, None, "KV cache bytes per GPU (vLLM >= 0.10.2); overrides utilization"),
    "max_model_len": Key((int, str), None, 'longest sequence (prompt + output) in tokens, or "auto": vLLM fits it '
                         "to the KV cache (vLLM >= 0.20)"),
    "max_num_seqs": Key(int, None, "most sequences in one batch"),
    "max_num_batched_tokens": Key(int, None, "most tokens in one scheduler step"),
    "host": Key(str, "127.0.0.1", "bind address (127.0.0.1 = this machine only)"),
    "port": Key(int, 8000, "HTTP port"),
    "enforce_eager": Key(bool, None, "no CUDA graphs: less memory, slower decode"),
    "disable_custom_all_reduce": Key(bool, None, "NCCL instead of vLLM's own all-reduce between GPUs "
                                     "(`qwen-tui doctor --p2p` says when it returns wrong data)"),
    "enable_prefix_caching": Key(bool, None, "reuse KV of shared prompt prefixes"),
    "enable_chunked_prefill": Key(bool, None, "split long prefills across steps"),
    "kv_cache_dtype": Key(str, None, "KV cache dtype (auto, fp8, fp8_e4m3, fp8_e5m2, ...)"),
    "block_size": Key(int, None, "tokens per KV block"),
    "swap_space": Key((int, float), None, "CPU swap GiB per GPU (removed in vLLM 0.18)"),
    "cpu_offload_gb": Key((int, float), None, "GiB of weights per GPU kept in CPU memory"),
    "quantization": Key(str, None, "quantization method (awq, gptq, fp8, ...)"),
    "api_key": Key(str, None, "require this key on /v1 (prefer api_key_file; health and metrics stay open)"),
    "api_key_file": Key(str, None, "file holding the API key, mode 0600 (`qwen-tui gen-key` writes one)"),
    "trust_remote_code": Key(bool, None, "run the model repo's own code"),
    "download_dir": Key(str, None, "where weights are downloaded"),
    "seed": Key(int, None, "random seed"),
    "disable_log_requests": Key(bool, None, "old flag, gone by vLLM 0.20"),
    "enable_log_requests": Key(bool, None, "log each request (vLLM >= 0.10.2)"),
    "disable_log_stats": Key(bool, None, "no periodic throughput lines"),
    "disable_uvicorn_access_log": Key(bool, None, "no access log lines"),
    "enable_force_include_usage": Key(bool, None, "always send the usage chunk"),
    "shutdown_timeout": Key(int, None, "seconds to drain requests on SIGTERM (vLLM >= 0.20)"),
    "generation_config": Key(str, None, "'auto', 'vllm' or a folder"),
    "max_logprobs": Key(int, None, "most logprobs a request may ask for"),
    "enable_sleep_mode": Key(bool, None, "allow `qwen-tui sleep` / `wake`: free the GPU memory without a restart "
                             "(adds VLLM_SERVER_DEV_MODE=1; CUDA only, not vLLM's CPU build)"),
    "sleep_after_idle_s": Key((int, float), None, "put a READY server to sleep (level 1) after this many seconds "
                              "with no running or waiting request (needs enable_sleep_mode; unset = never)"),
    "extra_args": Key(list, [], "flags passed to vllm serve verbatim"),
    "env": Key(dict, {}, "environment of the server, e.g. NCCL_P2P_DISABLE = \"1\""),
}

CONSOLE: dict[str, Key] = {
    "vllm_python": Key(str, "", "python interpreter that has vllm installed ('' = this one)"),
    "health_interval_s": Key((int, float), 1.0, "seconds between /health polls"),
    "health_grace_s": Key((int, float), 15.0, "seconds /health may fail on a ready server before FAILED"),
    "gpu_interval_s": Key((int, float), 1.0, "seconds between NVML samples"),
    "metrics_interval_s": Key((int, float), 1.0, "seconds between /metrics reads while ready"),
    "host_interval_s": Key((int, float), 5.0, "seconds between the host panel's samples (CPU, RAM, RSS)"),
    "history_interval_s": Key((int, float), 5.0, "seconds between the flight recorder's samples of /metrics"),
    "history_keep_h": Key((int, float), 48.0, "hours the flight recorder keeps (older samples are dropped)"),
    "stop_timeout": Key((int, float), 30.0, "seconds between SIGTERM and SIGKILL on stop"),
    "on_exit": Key(str, "ask", "when the console quits: ask, keep or stop the server",
                   ("ask", "keep", "stop")),
    "confirm": Key(str, "running", "ask before x stop / r restart: running (when READY), always or never",
                   ("running", "always", "never")),
    "restart": Key(str, "on-failure", "restart the server after a failure", ("on-failure", "never")),
    "restart_max_failures": Key(int, 5, "give up after this many failures ..."),
    "restart_window_s": Key((int, float), 600.0, "... within this many seconds"),
    "log_max_lines": Key(int, 20000, "lines the log pane keeps"),
    "theme": Key(str, "qwen-dark", "colour theme"),
}

PLANNER: dict[str, Key] = {
    "gpu_memory_gib": Key((int, float), 24.0, "memory per GPU when NVML is not available"),
    "gpu_name": Key(str, "NVIDIA GeForce RTX 3090", "GPU model when NVML is not available"),
    "gpu_count": Key(int, 2, "GPUs in the box when NVML is not available"),
    "device": Key(str, "cuda", "what vLLM runs on", ("cuda", "cpu")),
}

CHAT: dict[str, Key] = {
    "max_tokens": Key(int, 512, "most tokens a reply may have"),
    "temperature": Key((int, float), 0.7, "sampling temperature"),
    "top_p": Key((int, float), 1.0, "nucleus sampling: keep the likeliest tokens up to this probability (1 = off)"),
    "system_prompt": Key(str, "You are a helpful assistant.", "system message ('' = none)"),
}

SCHEMA: dict[str, dict[str, Key]] = {
    "server": SERVER, "console": CONSOLE, "planner": PLANNER, "chat": CHAT,
}

# The allowed range of every numeric setting: (lowest, highest), None = unbounded on that side.
# A test checks that each int/float key of SCHEMA has an entry here.
RANGES: dict[tuple[str, str], tuple[float | None, float | None]] = {
    ("server", "tensor_parallel_size"): (1, 1024), ("server", "pipeline_parallel_size"): (1, 1024),
    ("server", "gpu_memory_utilization"): (0.01, 1), ("server", "kv_cache_memory_bytes"): (1, None),
    ("server", "max_model_len"): (1, None), ("server", "max_num_seqs"): (1, None),
    ("server", "max_num_batched_tokens"): (1, None), ("server", "port"): (1, 65535),
    ("server", "block_size"): (1, None), ("server", "swap_space"): (0, None),
    ("server", "cpu_offload_gb"): (0, None), ("server", "seed"): (0, None),
    ("server", "shutdown_timeout"): (0, None), ("server", "max_logprobs"): (0, None),
    ("console", "health_interval_s"): (0.05, 3600), ("console", "health_grace_s"): (0, 86400),
    ("console", "gpu_interval_s"): (0.1, 3600), ("console", "metrics_interval_s"): (0.05, 3600),
    ("server", "sleep_after_idle_s"): (1, None),
    ("console", "host_interval_s"): (0.5, 3600), ("console", "history_interval_s"): (1, 3600),
    ("console", "history_keep_h"): (0.1, 24 * 366),
    ("console", "stop_timeout"): (0, 3600), ("console", "restart_max_failures"): (1, 1000),
    ("console", "restart_window_s"): (1, None), ("console", "log_max_lines"): (100, 10_000_000),
    ("planner", "gpu_memory_gib"): (0.1, 100_000), ("planner", "gpu_count"): (1, 1024),
    ("chat", "max_tokens"): (1, None), ("chat", "temperature"): (0, 2), ("chat", "top_p"): (0.001, 1),
}
# Sections with a parser of their own: [cluster] and [[cluster.box]] (backend/cluster/config.py).
OWN_SECTIONS = ("cluster",)
# Strings that may not be empty when set.
NON_EMPTY = {("server", "model"), ("server", "host"), ("server", "api_key"), ("server", "api_key_file")}
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def range_text(section: str, key: str) -> str:
    low, high = RANGES.get((section, key), (None, None))
    if low is not None and high is not None:
        return f"{low:g} to {high:g}"
    return f"at least {low:g}" if low is not None else (f"at most {high:g}" if high is not None else "")


@dataclass
class Settings:
    server: dict[str, Any]
    console: dict[str, Any]
    planner: dict[str, Any]
    chat: dict[str, Any]
    source: Path | None = None
    demo: bool = False
    overrides: list[str] = field(default_factory=list)
    profile: str | None = None  # the active workload profile ([profiles.NAME] over [server])
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)  # every known profile

    @property
    def env(self) -> dict[str, str]:
        return {k: str(v) for k, v in (self.server.get("env") or {}).items()}

    @property
    def extra_args(self) -> list[str]:
        return [str(a) for a in (self.server.get("extra_args") or [])]

    @property
    def served_name(self) -> str:
        name = self.server.get("served_model_name")
        if isinstance(name, list):
            return str(name[0]) if name else self.server["model"]
        return str(name or self.server["model"])

    @property
    def base_url(self) -> str:
        host = self.server.get("host") or "127.0.0.1"
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.server['port']}"

    @property
    def api_key(self) -> str | None:
        """The key the console sends ($QWEN_TUI_API_KEY, server.api_key_file, server.api_key)."""
        return apikey.resolve(self, strict=False)

    def snapshot(self) -> dict[str, Any]:
        """The settings as recorded in the state file: any key shown as <hidden>."""
        server = copy.deepcopy(self.server)
        if server.get("api_key"):
            server["api_key"] = "<hidden>"
        return {"server": server, "console": dict(self.console),
                "planner": dict(self.planner), "chat": dict(self.chat), "demo": self.demo,
                "profile": self.profile}


def _type_name(t: type | tuple[type, ...]) -> str:
    names = {int: "integer", float: "number", str: "string", bool: "true/false", list: "list",
             dict: "table"}
    ts = t if isinstance(t, tuple) else (t,)
    return " or ".join(dict.fromkeys(names.get(x, x.__name__) for x in ts))


def check_value(section: str, key: str, value: Any) -> Any:
    """Validate one value against the schema; returns it (ints widened to float where needed)."""
    table = SCHEMA.get(section)
    if table is None:
        raise ConfigError(f"unknown section [{section}] (known: {', '.join(SCHEMA)})")
    spec = table.get(key)
    if spec is None:
        hint = " (pass other vllm flags with server.extra_args)" if section == "server" else ""
        raise ConfigError(f"unknown setting {section}.{key}{hint}")
    types = spec.type if isinstance(spec.type, tuple) else (spec.type,)
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok and float in types and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        name = _type_name(spec.type)
        raise ConfigError(f"{section}.{key} must be {'an' if name[0] in 'aeiou' else 'a'} {name}, "
                          f"got {type(value).__name__} {value!r}")
    if spec.choices and value not in spec.choices:
        raise ConfigError(f"{section}.{key} = {value!r} is not one of {', '.join(map(str, spec.choices))}")
    if key == "gpu_memory_utilization" and not 0 < value <= 1:
        raise ConfigError(f"server.gpu_memory_utilization = {value} must be in (0, 1]")
    if key == "max_model_len" and isinstance(value, str) and value.strip().lower() != "auto":
        raise ConfigError(f'server.max_model_len must be an integer (tokens) or "auto", got {value!r}')
    if key == "port" and not 0 < value < 65536:
        raise ConfigError(f"server.port = {value} is not a TCP port (1 to 65535)")
    low, high = RANGES.get((section, key), (None, None))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != value or (low is not None and value < low) or (high is not None and value > high):
            raise ConfigError(f"{section}.{key} = {value!r} is out of range: must be {range_text(section, key)}")
    if (section, key) in NON_EMPTY and isinstance(value, str) and not value.strip():
        raise ConfigError(f"{section}.{key} may not be empty" + (" (the model to serve: a HF repo id or a "
                                                                  "local directory)" if key == "model" else ""))
    if key == "served_model_name" and (value == "" or value == [] or
                                       (isinstance(value, list) and not all(isinstance(v, str) and v.strip()
                                                                            for v in value))):
        raise ConfigError("server.served_model_name must be a non-empty name or a list of non-empty names")
    if key == "extra_args" and not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                       for v in value):
        raise ConfigError("server.extra_args must be a list of strings (flags and their values)")
    if key == "env":
        for k, v in value.items():
            if not ENV_NAME.match(str(k)):
                raise ConfigError(f"server.env.{k} is not a valid environment variable name "
                                  "(letters, digits and _, not starting with a digit)")
            if not isinstance(v, (str, int, float, bool)):
                raise ConfigError(f"server.env.{k} must be a string")
            if "\0" in str(v):
                raise ConfigError(f"server.env.{k} may not contain a NUL byte")
    return value


def defaults() -> dict[str, dict[str, Any]]:
    return {sec: {k: copy.deepcopy(s.default) for k, s in table.items()}
            for sec, table in SCHEMA.items()}


def locate(text: str | None, section: str, key: str | None = None) -> int | None:
    """The line (1-based) of `key` in `[section]` (or of the section header), for messages."""
    if not text:
        return None
    current, header = None, None
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        m = re.match(r"\[\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\s*(#.*)?$", stripped)
        if m and not stripped.startswith("[["):
            current = m.group(1).replace('"', "").replace("'", "").replace(" ", "")
            if current == section and header is None:
                header = n
            if key and current == f"{section}.{key}":
                return n  # a sub-table such as [server.env]
            continue
        if key is None or current != section:
            continue
        if re.match(rf"[\"']?{re.escape(key)}[\"']?\s*[=.]", stripped):
            return n
    return header


def _merge(base: dict[str, dict[str, Any]], data: dict[str, Any], where: str, text: str | None = None) -> None:
    for section, table in data.items():
        at = f"{where}:{locate(text, section) or 1}"
        if not isinstance(table, dict):
            raise ConfigError(f"{at}: '{section}' must be a table like [{section}]")
        if section in OWN_SECTIONS:
            continue  # read and checked by its own module
        if section == "profiles":  # [profiles.NAME]: overlays of [server] keys (backend/profiles.py)

            for name, overlay in table.items():
                try:
                    base.setdefault("profiles", {}).update(check_profiles({name: overlay}))
                except ConfigError as e:
                    line = locate(text, f"profiles.{name}") or locate(text, section)
                    raise ConfigError(f"{where}:{line or 1}: {e}") from None
            continue
        if section not in SCHEMA:
            known = ", ".join([*SCHEMA, "profiles", *OWN_SECTIONS])
            raise ConfigError(f"{at}: unknown section [{section}] (known: {known})")
        for key, value in table.items():
            try:
                base[section][key] = check_value(section, key, value)
            except ConfigError as e:
                line = locate(text, section, key)
                raise ConfigError(f"{where}:{line}: {e}" if line else f"{where}: {e}") from None


def parse_override(text: str) -> tuple[str, str, Any]:
    """`section.key=value` -> (section, key, typed value). Values are TOML; bare words are strings."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    dotted, raw = text.split("=", 1)
    parts = dotted.strip().split(".")
    if len(parts) == 3 and parts[0] == "server" and parts[1] == "env":
        if not ENV_NAME.match(parts[2]):
            raise ConfigError(f"--set {text!r}: {parts[2]!r} is not a valid environment variable name "
                              "(letters, digits and _, not starting with a digit)")
        return "server", f"env.{parts[2]}", raw
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"--set {text!r}: expected section.key=value, e.g. server.port=8001")
    section, key = parts
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    spec = SCHEMA.get(section, {}).get(key)
    if spec is not None and isinstance(value, (int, float, bool)) and spec.type is str:
        value = raw.strip()
    return section, key, value


def _not_a_file(p: Path) -> str:
    """Why a config path is not a file to read, in words."""
    if p.is_dir():
        return "is a directory: give the config.toml inside it"
    return "does not exist" if not p.exists() else "is not a regular file"


def find_config(explicit: str | None = None) -> Path | None:
    if explicit:
        p = Path(explicit).expanduser()
        if not p.is_file():
            raise ConfigError(f"config file {p} {_not_a_file(p)}")
        return p
    env = os.environ.get("QWEN_TUI_CONFIG")
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise ConfigError(f"$QWEN_TUI_CONFIG points to {p}, which {_not_a_file(p)}")
        return p
    for p in (Path.cwd() / "config.toml", paths.config_dir() / "config.toml"):
        if p.is_file():
            return p
    return None


def decode(raw: bytes, path: Path | str) -> str:
    """UTF-8 text of a config file, or a ConfigError naming file:line:column of the bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(f"{path}:{line}:{col}: not UTF-8 (byte 0x{raw[e.start]:02x}); "
                          "save the file as UTF-8") from None


def parse_toml(text: str, path: Path | str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        at = f"{path}:{m.group(1)}:{m.group(2)}" if m else str(path)
        raise ConfigError(f"{at}: not valid TOML: {e}") from None
    except (RecursionError, ValueError) as e:
        raise ConfigError(f"{path}: not valid TOML: {str(e)[:120]}") from None


def read_toml_text(path: Path) -> tuple[dict[str, Any], str]:
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    text = decode(raw, path)
    return parse_toml(text, path), text


def read_toml(path: Path) -> dict[str, Any]:
    return read_toml_text(path)[0]


def check_profiles(table: Any, where: str = "") -> dict[str, dict[str, Any]]:
    """The file's [profiles] table validated: {name: {server key: value, description?}}.
    Raises ConfigError naming the profile and key."""
    at = f"{where}: " if where else ""
    if not isinstance(table, dict):
        raise ConfigError(f"{at}'profiles' must be tables like [profiles.chat]")
    out: dict[str, dict[str, Any]] = {}
    for name, overlay in table.items():
        if not profile_overlays.NAME.match(str(name)):
            raise ConfigError(f"{at}profile name {name!r}: letters, digits, _ and - only")
        if not isinstance(overlay, dict):
            raise ConfigError(f"{at}profiles.{name} must be a table like [profiles.{name}] of [server] keys")
        clean: dict[str, Any] = {}
        for key, value in overlay.items():
            if key == "description":
                if not isinstance(value, str):
                    raise ConfigError(f"{at}profiles.{name}.description must be a string")
                clean[key] = value
                continue
            try:
                clean[key] = check_value("server", key, value)
            except ConfigError as e:
                raise ConfigError(f"{at}profiles.{name}: {e}") from None
        out[str(name)] = clean
    return out


def apply_demo(values: dict[str, dict[str, Any]], with_file: bool = True) -> None:
    """--demo: the server settings are the demo's (backend/demo.py) over the defaults, whatever the
    file says; the planner plans for the CPU, chat replies are short; console settings are kept."""
    values["server"] = {**defaults()["server"], **demo_settings.server_overlay()}
    values["planner"].update(demo_settings.PLANNER_OVERLAY)
    values["chat"].update(demo_settings.CHAT_OVERLAY)
    path = demo_settings.settings_path()
    if with_file and path.is_file():  # the console's edits in --demo (they never go into the user's file)
        data, text = read_toml_text(path)
        data = {k: v for k, v in data.items() if k in SCHEMA}  # it holds settings, not profiles
        _merge(values, data, str(path), text)


def load(config: str | None = None, demo: bool = False, overrides: list[str] | None = None,
         profile: str | None = None) -> Settings:
    """Build the settings for one run. Raises ConfigError with a message fit for the user.
    Precedence: defaults < the file < --demo (and its settings file) < the profile ([profiles.NAME]) < --set."""
    values = defaults()
    path = find_config(config)
    if path is not None:
        data, text = read_toml_text(path)
        _merge(values, data, str(path), text)
    known = profile_overlays.merged(values.pop("profiles", None))
    if demo:
        apply_demo(values)
        known = copy.deepcopy(demo_settings.PROFILES)  # the file's (and built-in) ones are sized for a GPU box
    if profile:
        if profile not in known:
            raise ConfigError(f"--profile {profile}: {profile_overlays.unknown(profile, known)}")
        profile_overlays.apply(values["server"], known[profile])
    for text in overrides or []:
        section, key, value = parse_override(text)
        if key.startswith("env."):
            try:
                values["server"]["env"] = check_value("server", "env",
                                                      dict(values["server"]["env"], **{key[4:]: value}))
            except ConfigError as e:
                raise ConfigError(f"--set {text}: {e}") from None
            continue
        try:
            values[section][key] = check_value(section, key, value)
        except ConfigError as e:
            raise ConfigError(f"--set {text}: {e}") from None
    return Settings(server=values["server"], console=values["console"],
                    planner=values["planner"], chat=values["chat"], source=path, demo=demo,
                    overrides=list(overrides or []), profile=profile or None, profiles=known)


def save_setting(path: Path, section: str, key: str, value: Any) -> None:
    """Change one key in the user's file, keeping comments and order; written atomically.

    The new value is validated first and the whole new text is re-read before it replaces the
    old file, so a failure leaves the old file untouched. A table value ([server.env]) is changed
    name by name, so the comments inside the table survive too.
    """
    import tomlkit  # tomlkit only to write a file (reads use tomllib): start-up

    value = check_value(section, key, value)

    def change(doc: Any) -> bool:
        if section not in doc:
            doc.add(section, tomlkit.table())
        if not isinstance(value, dict):
            doc[section][key] = value
            return True
        if key not in doc[section] or not isinstance(doc[section][key], dict):
            doc[section][key] = tomlkit.table()
        table = doc[section][key]
        for name in [n for n in table if n not in value]:
            del table[name]
        for name, v in value.items():
            if name not in table or table[name] != v:
                table[name] = v
        return True

    _edit_file(path, change)


def remove_setting(path: Path, section: str, key: str) -> None:
    """Take one key out of the user's file (its default applies); comments kept, atomic."""

    def change(doc: Any) -> bool:
        if section in doc and key in doc[section]:
            del doc[section][key]
            return True
        return False

    _edit_file(path, change)


def writable_problem(path: Path) -> str | None:
    """Why `path` must not be replaced by a save (read-only for its owner, or not writable by us)."""
    if not path.exists():
        return None
    mode = path.stat().st_mode
    if not mode & stat.S_IWUSR or not os.access(path, os.W_OK):
        return (f"{path} is read-only (mode {stat.S_IMODE(mode):04o}): not saved; make it writable "
                f"(chmod u+w {path}) to save from here, or edit it by hand")
    return None


def _holds_key(data: dict[str, Any]) -> bool:
    server = data.get("server")
    return isinstance(server, dict) and bool(server.get("api_key"))


def _edit_file(path: Path, change: Callable[[Any], bool]) -> None:
    """Parse the file with tomlkit, apply `change(doc)` (False: nothing to write), check that the
    new text loads, and replace the file atomically. A read-only file is refused, never replaced;
    a file that holds server.api_key is written user-only (0600)."""
    import tomlkit  # tomlkit only to write a file (reads use tomllib): start-up

    problem = writable_problem(path)
    if problem:
        raise ConfigError(problem)
    text = decode(path.read_bytes(), path) if path.exists() else ""
    try:
        doc = tomlkit.parse(text)
    except Exception as e:  # tomlkit raises its own ParseError subclasses
        raise ConfigError(f"{path}: not valid TOML, not saving: {e}") from None
    if not change(doc):
        return
    new_text = tomlkit.dumps(doc)
    data = parse_toml(new_text, path)
    _merge(defaults(), data, str(path), new_text)  # never write a file we could not read
    atomic_write(path, new_text, mode=0o600 if _holds_key(data) else None)


def atomic_write(path: Path, text: str, mode: int | None = None) -> None:
    """Replace `path` with `text` (temp file + rename). `mode`: the new file's permissions;
    None keeps the old file's (0600 for a new one is up to the caller)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        elif path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
