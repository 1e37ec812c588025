"""`qwen-tui doctor`: pre-flight checks that say, before a slow launch fails, what will go wrong.

Each check returns a `Check` (name, status "ok" | "warn" | "fail" | "skip", message with figures,
fix or None). Every fact from outside (NVML, the vLLM install, ctypes, /dev/shm, sockets, the
supervisor's state, processes, environment, home folder) comes through `Env`, so tests drive each
branch without a GPU. Nothing here raises to the caller: a check that breaks becomes a "warn".
The memory arithmetic is the ledger's (backend.ledger); the doctor only reports it.

`qwen-tui doctor --json` prints `report()`: {"ok": bool, "checks": [{"name", "status", "message",
"fix"}...], "settings_source": str | null}; the exit code is 0 when no check failed, 1 otherwise.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, TextIO

from backend.doctor.context import (
    ORDER,
    STATUSES,
    Check,
    Context,
    Env,
    scan_processes,
    server_status,
    site_dirs,
)
from backend.doctor.gpu_checks import (
    check_bf16,
    check_cuda_libs,
    check_gpu_memory,
    check_gpus,
    check_memory,
    check_p2p,
    check_vllm,
    check_vllm_flags,
)
from backend.doctor.host_checks import (
    check_disk,
    check_model,
    check_port,
    check_server,
    check_shm,
    folder_problems,
)
from backend.doctor.key_checks import check_security
from backend.hf_cache import hf_cache_root
from backend.server.ports import listening_pids, probe_bind
from backend.settings import Settings

__all__ = [
    "CHECKS", "Check", "Context", "Env", "ORDER", "STATUSES", "check_bf16", "check_cuda_libs", "check_disk",
    "check_gpu_memory", "check_gpus", "check_memory", "check_model", "check_p2p", "check_port",
    "check_server", "check_shm", "check_vllm", "check_vllm_flags", "folder_problems", "format_text",
    "hf_cache_root", "listening_pids", "probe_bind", "report", "run_checks", "run_doctor", "scan_processes",
    "server_status", "site_dirs",
]

# -- running them ------------------------------------------------------------------------------------
CHECKS: list[tuple[str, Callable[[Context], Any]]] = [
    ("vllm", check_vllm), ("vllm-flags", check_vllm_flags), ("cuda-libs", check_cuda_libs),
    ("gpus", check_gpus), ("bf16", check_bf16), ("model", check_model), ("disk", check_disk),
    ("memory", check_memory),  # after gpus, bf16 and model: it leaves out what they reported
    ("gpu-memory", check_gpu_memory), ("p2p", check_p2p), ("shm", check_shm), ("port", check_port),
    ("server", check_server), ("security", check_security),
]


def run_checks(settings: Settings, env: Env | None = None) -> list[Check]:
    """Every check, in ORDER. Never raises: a check that breaks is reported as a warning."""
    env = env or Env()
    ctx = Context(settings, env)
    own_monitor = ctx.monitor is None and ctx.device == "cuda"
    if own_monitor:
        from backend.gpu import GpuMonitor  # NVML bindings only when a monitor is made here

        ctx.monitor = GpuMonitor()
    out: list[Check] = []
    try:
        for name, fn in CHECKS:
            try:
                got = fn(ctx)
            except Exception as e:  # noqa: BLE001 - the doctor reports, it never crashes
                got = Check(name, "warn", f"check could not run: {type(e).__name__}: {e}")
            for c in got if isinstance(got, list) else [got]:
                ctx.results.setdefault(c.name, c)
                out.append(c)
    finally:
        if own_monitor:
            ctx.monitor.shutdown()
    rank = {n: i for i, n in enumerate(ORDER)}
    return sorted(out, key=lambda c: rank.get(c.name.split("/", 1)[0], len(ORDER)))


def report(settings: Settings, checks: list[Check]) -> dict[str, Any]:
    """The `qwen-tui doctor --json` contract."""
    return {"ok": not any(c.status == "fail" for c in checks), "checks": [c.to_dict() for c in checks],
            "settings_source": str(settings.source) if settings.source else None}


MARKS = {"ok": "[ ok ]", "warn": "[warn]", "fail": "[FAIL]", "skip": "[skip]"}


def format_text(settings: Settings, checks: list[Check]) -> str:
    src = str(settings.source) if settings.source else "built-in defaults"
    lines = [f"qwen-tui doctor: settings from {src}" + (" (--demo)" if settings.demo else "")]
    width = min(max((len(c.name) for c in checks), default=0), 12)
    for c in checks:
        lines.append(f"{MARKS.get(c.status, c.status)} {c.name:<{width}}  {c.message}")
        if c.fix:
            lines.append(" " * (len(MARKS["ok"]) + width + 3) + f"fix: {c.fix}")
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    lines.append(f"{counts['ok']} ok, {counts['warn']} warning(s), {counts['fail']} failed, "
                 f"{counts['skip']} skipped")
    return "\n".join(lines) + "\n"


def run_doctor(settings: Settings, as_json: bool, out: TextIO | None = None, env: Env | None = None) -> int:
    """Print the checks; 0 when none failed, 1 when one did."""
    out = out or sys.stdout
    checks = run_checks(settings, env)
    if as_json:
        out.write(json.dumps(report(settings, checks), indent=2) + "\n")
    else:
        out.write(format_text(settings, checks))
    return 0 if not any(c.status == "fail" for c in checks) else 1
