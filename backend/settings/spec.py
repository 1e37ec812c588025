"""Every setting's facts, in one place: the typed sections, whose every field carries its `Key`.

A `Key` says what the file may hold (type, default, choices, range, not empty), when a change applies
(now, when the console starts, when the server restarts, or when the supervisor starts: also a
restart), how `[server]` keys become `vllm serve` flags, and whether the value is secret. SCHEMA, the
docs (docs/gen_settings_doc.py), the checks (backend/settings/check.py), the settings screen's rows,
the launch argv and the chat's parameters all read it from here.

The sections (`ServerSettings` ...) are frozen: built from the checked dicts by `from_values`, with
TOML's lists and tables as tuples and read-only mappings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import FrozenInstanceError
from functools import partial
from typing import Any, ClassVar, Literal, TypeVar, dataclass_transform

from backend.errors import ConfigError
from backend.record import record

# When a saved change is used. "supervisor": a console key the supervisor reads when it starts (so, like
# [server], on the next start or restart); "console-start": read once when the console starts.
Applies = Literal["now", "console-start", "restart", "supervisor"]
# How a [server] key reaches vLLM: "flag" (`--key-name VALUE`, a true bool as `--key-name`), "negatable"
# (a bool vLLM defaults to on: false is `--no-key-name`), "none" (not a flag: `via` says what it is).
Flag = Literal["flag", "negatable", "none"]
Range = tuple[float | None, float | None]


@record(frozen=True)
class Key:
    type: type | tuple[type, ...]  # what the TOML file may hold
    default: Any  # None: not set (for [server]: not passed, vLLM's default applies)
    help: str
    choices: tuple[Any, ...] | None = None
    range: Range | None = None  # (lowest, highest), None = unbounded on that side; every number has one
    non_empty: bool = False  # a string that may not be empty when set
    applies: Applies = "now"
    flag: Flag = "none"
    via: str = ""  # for a [server] key that is not a flag: how it reaches the server, in words
    secret: bool = False  # never shown: masked on screen, `<hidden>` in the state file
    # what the type, choices and range cannot say: called with a value of the right type, before the range is
    # checked; returns the value to keep (raises ConfigError)
    check: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        # the facts that must go together are checked when the schema is built (a test imports it)
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        numeric = int in types or float in types
        if numeric != (self.range is not None):
            raise TypeError(f"{self.help!r}: a number needs a range, and only a number has one")
        if self.non_empty and str not in types:
            raise TypeError(f"{self.help!r}: only a string can be non-empty")
        if self.flag == "negatable" and types != (bool,):
            raise TypeError(f"{self.help!r}: only a true/false key can be negatable")

    @property
    def is_number(self) -> bool:
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        return int in types or float in types

    @property
    def needs_restart(self) -> bool:
        """The change reaches a running server only when it restarts."""
        return self.applies in ("restart", "supervisor")


def range_words(span: Range | None) -> str:
    low, high = span or (None, None)
    if low is not None and high is not None:
        return f"{low:g} to {high:g}"
    return f"at least {low:g}" if low is not None else (f"at most {high:g}" if high is not None else "")


def _spec(type: type | tuple[type, ...], default: Any, help: str, choices: tuple[Any, ...] | None = None,
          **facts: Any) -> Any:
    """A section's field: its Key (the section's class turns it into the field's spec)."""
    return Key(type, default, help, choices, **facts)


class Section:
    """A frozen typed section: one attribute per Key. Not @dataclass: generating the dataclass methods
    of four sections cost ~5 ms of the console's start (benchmarks/bench_startup.py); this costs none."""

    __slots__ = ()
    KEYS: ClassVar[dict[str, Key]]  # field name -> its Key, in declaration order

    def __init__(self, **values: Any) -> None:
        for name, key in self.KEYS.items():
            object.__setattr__(self, name, values.pop(name) if name in values else _typed(key.default))
        if values:
            raise TypeError(f"{type(self).__name__}: unknown settings {', '.join(sorted(values))}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(getattr(self, n) == getattr(other, n) for n in self.KEYS)

    __hash__ = None  # type: ignore[assignment]  # a table (env) is not hashable

    def __reduce__(self) -> tuple[Any, ...]:  # copy, deepcopy and pickle build it again through __init__
        return (_rebuild, (type(self), {n: getattr(self, n) for n in self.KEYS}))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.KEYS)})"


def _rebuild(cls: type[Section], values: dict[str, Any]) -> Section:
    return cls(**values)


S = TypeVar("S", bound=type[Section])


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(Key,))
def _section(cls: S) -> S:
    """The class with its Keys collected (KEYS) and taken off the class, so that each instance holds a value."""
    keys = {name: value for name, value in vars(cls).items() if isinstance(value, Key)}
    ns = {name: value for name, value in vars(cls).items() if name not in keys and name not in ("__dict__",
                                                                                                   "__weakref__")}
    return type(cls.__name__, cls.__bases__, {**ns, "__slots__": tuple(keys), "KEYS": keys})  # type: ignore[return-value]


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _utilization(value: float) -> float:
    if not 0 < value <= 1:
        raise ConfigError(f"server.gpu_memory_utilization = {value} must be in (0, 1]")
    return value


def _max_model_len(value: int | str) -> int | str:
    if isinstance(value, str):
        if value.strip().lower() != "auto":
            raise ConfigError(f'server.max_model_len must be an integer (tokens) or "auto", got {value!r}')
        return "auto"  # as the typed section holds it (vLLM reads the word in any case)
    return value


def _port(value: int) -> int:
    if not 0 < value < 65536:
        raise ConfigError(f"server.port = {value} is not a TCP port (1 to 65535)")
    return value


def _served_names(value: str | list[Any]) -> str | list[Any]:
    if value == "" or value == [] or (isinstance(value, list) and not all(isinstance(v, str) and v.strip()
                                                                          for v in value)):
        raise ConfigError("server.served_model_name must be a non-empty name or a list of non-empty names")
    return value


def _extra_args(value: list[Any]) -> list[Any]:
    if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        raise ConfigError("server.extra_args must be a list of strings (flags and their values)")
    return value


def _env(value: dict[str, Any]) -> dict[str, Any]:
    for k, v in value.items():
        if not ENV_NAME.match(str(k)):
            raise ConfigError(f"server.env.{k} is not a valid environment variable name "
                              "(letters, digits and _, not starting with a digit)")
        if not isinstance(v, (str, int, float, bool)):
            raise ConfigError(f"server.env.{k} must be a string")
        if "\0" in str(v):
            raise ConfigError(f"server.env.{k} may not contain a NUL byte")
    return value


_server = partial(_spec, applies="restart", flag="flag")
_NUM = (int, float)
_ANY_STR_OR_LIST = (str, list)
_KEY_VIA = "`VLLM_API_KEY` in the server's environment, never on its command line"


# Each [server] key is a vllm serve flag unless its flag says otherwise.
@_section
class ServerSettings(Section):
    model: str = _server(str, "Qwen/Qwen2.5-14B-Instruct", "HF repo id or local directory of the model",
                         non_empty=True, flag="none", via="the model argument of `vllm serve`")
    served_model_name: str | tuple[str, ...] | None = _server(_ANY_STR_OR_LIST, None,
                                                              "name(s) clients use in the `model` field",
                                                              check=_served_names)
    tensor_parallel_size: int = _server(int, 1, "GPUs the model is split across (heads must divide by it)",
                                        range=(1, 1024))
    pipeline_parallel_size: int | None = _server(int, None, "pipeline stages (PCIe boxes: prefer tensor parallel)",
                                                 range=(1, 1024))
    dtype: str | None = _server(str, None, "weights/activations dtype",
                                ("auto", "half", "float16", "bfloat16", "float", "float32"))
    gpu_memory_utilization: float | None = _server(float, None, "fraction of each GPU vLLM may use (0-1)",
                                                   range=(0.01, 1), check=_utilization)
    kv_cache_memory_bytes: int | None = _server(int, None, "KV cache bytes per GPU (vLLM >= 0.10.2); overrides "
                                                "utilization", range=(1, None))
    max_model_len: int | Literal["auto"] | None = _server(
        (int, str), None, 'longest sequence (prompt + output) in tokens, or "auto": vLLM fits it to the KV cache '
        "(vLLM >= 0.20)", range=(1, None), check=_max_model_len)
    max_num_seqs: int | None = _server(int, None, "most sequences in one batch", range=(1, None))
    max_num_batched_tokens: int | None = _server(int, None, "most tokens in one scheduler step", range=(1, None))
    host: str = _server(str, "127.0.0.1", "bind address (127.0.0.1 = this machine only)", non_empty=True)
    port: int = _server(int, 8000, "HTTP port", range=(1, 65535), check=_port)
    enforce_eager: bool | None = _server(bool, None, "no CUDA graphs: less memory, slower decode")
    disable_custom_all_reduce: bool | None = _server(bool, None, "NCCL instead of vLLM's own all-reduce between "
                                                     "GPUs (`qwen-tui doctor --p2p` says when it returns wrong data)")
    enable_prefix_caching: bool | None = _server(bool, None, "reuse KV of shared prompt prefixes", flag="negatable")
    enable_chunked_prefill: bool | None = _server(bool, None, "split long prefills across steps", flag="negatable")
    kv_cache_dtype: str | None = _server(str, None, "KV cache dtype (auto, fp8, fp8_e4m3, fp8_e5m2, ...)")
    block_size: int | None = _server(int, None, "tokens per KV block", range=(1, None))
    swap_space: float | None = _server(_NUM, None, "CPU swap GiB per GPU (removed in vLLM 0.18)", range=(0, None))
    cpu_offload_gb: float | None = _server(_NUM, None, "GiB of weights per GPU kept in CPU memory", range=(0, None))
    quantization: str | None = _server(str, None, "quantization method (awq, gptq, fp8, ...)")
    api_key: str | None = _server(str, None, "require this key on /v1 (prefer api_key_file; health and metrics "
                                  "stay open)", non_empty=True, secret=True, flag="none", via=_KEY_VIA)
    api_key_file: str | None = _server(str, None, "file holding the API key, mode 0600 (`qwen-tui gen-key` writes "
                                       "one)", non_empty=True, flag="none", via=_KEY_VIA)
    trust_remote_code: bool | None = _server(bool, None, "run the model repo's own code")
    download_dir: str | None = _server(str, None, "where weights are downloaded")
    seed: int | None = _server(int, None, "random seed", range=(0, None))
    disable_log_requests: bool | None = _server(bool, None, "old flag, gone by vLLM 0.20")
    enable_log_requests: bool | None = _server(bool, None, "log each request (vLLM >= 0.10.2)")
    disable_log_stats: bool | None = _server(bool, None, "no periodic throughput lines")
    disable_uvicorn_access_log: bool | None = _server(bool, None, "no access log lines")
    enable_force_include_usage: bool | None = _server(bool, None, "always send the usage chunk")
    shutdown_timeout: int | None = _server(int, None, "seconds to drain requests on SIGTERM (vLLM >= 0.20)",
                                           range=(0, None))
    generation_config: str | None = _server(str, None, "'auto', 'vllm' or a folder")
    max_logprobs: int | None = _server(int, None, "most logprobs a request may ask for", range=(0, None))
    enable_sleep_mode: bool | None = _server(bool, None, "allow `qwen-tui sleep` / `wake`: free the GPU memory "
                                             "without a restart (adds VLLM_SERVER_DEV_MODE=1; CUDA only, not vLLM's "
                                             "CPU build)")
    sleep_after_idle_s: float | None = _server(
        _NUM, None, "put a READY server to sleep (level 1) after this many seconds with no running or waiting "
        "request (needs enable_sleep_mode; unset = never)", range=(1, None), flag="none",
        via="none (read by qwen-tui's supervisor, not passed to vLLM)")
    extra_args: tuple[str, ...] = _server(list, [], "flags passed to vllm serve verbatim", flag="none",
                                          via="appended to the command line as they are", check=_extra_args)
    env: Mapping[str, str] = _server(dict, {}, "environment of the server, e.g. NCCL_P2P_DISABLE = \"1\"",
                                     flag="none", via="the server's environment", check=_env)


@_section
class ConsoleSettings(Section):
    vllm_python: str = _spec(str, "", "python interpreter that has vllm installed ('' = this one)",
                             applies="supervisor")
    health_interval_s: float = _spec(_NUM, 1.0, "seconds between /health polls", range=(0.05, 3600),
                                     applies="supervisor")
    health_grace_s: float = _spec(_NUM, 15.0, "seconds /health may fail on a ready server before FAILED",
                                  range=(0, 86400), applies="supervisor")
    gpu_interval_s: float = _spec(_NUM, 1.0, "seconds between NVML samples", range=(0.1, 3600),
                                  applies="console-start")
    metrics_interval_s: float = _spec(_NUM, 1.0, "seconds between /metrics reads while ready", range=(0.05, 3600))
    host_interval_s: float = _spec(_NUM, 5.0, "seconds between the host panel's samples (CPU, RAM, RSS)",
                                   range=(0.5, 3600))
    history_interval_s: float = _spec(_NUM, 5.0, "seconds between the flight recorder's samples of /metrics",
                                      range=(1, 3600))
    history_keep_h: float = _spec(_NUM, 48.0, "hours the flight recorder keeps (older samples are dropped)",
                                  range=(0.1, 24 * 366))
    stop_timeout: float = _spec(_NUM, 30.0, "seconds between SIGTERM and SIGKILL on stop", range=(0, 3600),
                                applies="supervisor")
    on_exit: Literal["ask", "keep", "stop"] = _spec(str, "ask", "when the console quits: ask, keep or stop the "
                                                    "server", ("ask", "keep", "stop"))
    confirm: Literal["running", "always", "never"] = _spec(
        str, "running", "ask before x stop / r restart: running (when READY), always or never",
        ("running", "always", "never"))
    restart: Literal["on-failure", "never"] = _spec(str, "on-failure", "restart the server after a failure",
                                                    ("on-failure", "never"), applies="supervisor")
    restart_max_failures: int = _spec(int, 5, "give up after this many failures ...", range=(1, 1000),
                                      applies="supervisor")
    restart_window_s: float = _spec(_NUM, 600.0, "... within this many seconds", range=(1, None),
                                    applies="supervisor")
    log_max_lines: int = _spec(int, 20000, "lines the log pane keeps", range=(100, 10_000_000),
                               applies="console-start")
    theme: str = _spec(str, "qwen-dark", "colour theme")


@_section
class PlannerSettings(Section):
    gpu_memory_gib: float = _spec(_NUM, 24.0, "memory per GPU when NVML is not available", range=(0.1, 100_000))
    gpu_name: str = _spec(str, "NVIDIA GeForce RTX 3090", "GPU model when NVML is not available")
    gpu_count: int = _spec(int, 2, "GPUs in the box when NVML is not available", range=(1, 1024))
    device: Literal["cuda", "cpu"] = _spec(str, "cuda", "what vLLM runs on", ("cuda", "cpu"))


# the ranges are what vLLM accepts (top_p 0 is refused: "top_p must be in (0, 1]")
@_section
class ChatSettings(Section):
    max_tokens: int = _spec(int, 512, "most tokens a reply may have (prompt + this must fit in max_model_len)",
                            range=(1, None))
    temperature: float = _spec(_NUM, 0.7, "sampling temperature", range=(0, 2))
    top_p: float = _spec(_NUM, 1.0, "nucleus sampling: keep the likeliest tokens up to this probability (1 = off)",
                         range=(0.001, 1))
    system_prompt: str = _spec(str, "You are a helpful assistant.", "system message ('' = none)")


SECTIONS: dict[str, type[Section]] = {"server": ServerSettings, "console": ConsoleSettings, "planner": PlannerSettings,
                             "chat": ChatSettings}


SERVER: dict[str, Key] = ServerSettings.KEYS
CONSOLE: dict[str, Key] = ConsoleSettings.KEYS
PLANNER: dict[str, Key] = PlannerSettings.KEYS
CHAT: dict[str, Key] = ChatSettings.KEYS
SCHEMA: dict[str, dict[str, Key]] = {"server": SERVER, "console": CONSOLE, "planner": PLANNER, "chat": CHAT}

T = TypeVar("T", bound=Section)


def _typed(value: Any) -> Any:
    """A checked TOML value as the sections hold it: lists as tuples, tables as fresh dicts (typed
    Mapping: read-only to mypy; a mappingproxy would make the settings impossible to deepcopy)."""
    if isinstance(value, list):
        return tuple(_typed(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _typed(v) for k, v in value.items()}
    return value


def from_values(cls: type[T], values: Mapping[str, Any]) -> T:
    """A frozen section from one section's checked values (a key missing there takes its default)."""
    out: dict[str, Any] = {}
    for name, key in cls.KEYS.items():
        value = _typed(values.get(name, key.default))
        if name == "extra_args":
            value = tuple(str(v) for v in value)
        elif name == "env":
            value = {k: str(v) for k, v in value.items()}
        out[name] = value
    return cls(**out)
