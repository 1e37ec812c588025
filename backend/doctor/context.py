"""The doctor's shared parts: the `Check` record, `Env` (every outside fact, replaceable in tests)
and `Context` (the settings plus facts computed once: install, server state, visible GPUs, ledger)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

from backend.server.launch import VllmInstall, detect_install, python_for
from backend.server.ports import listening_pids, probe_bind
from backend.server.status import HAS_PROCESS, in_group
from backend.settings import Settings

GiB = 1 << 30
MiB = 1 << 20
GB = 10**9
STATUSES = ("ok", "warn", "fail", "skip")
ORDER = ("vllm", "vllm-flags", "cuda-libs", "gpus", "bf16", "memory", "gpu-memory", "p2p", "shm",
         "port", "security", "model", "disk", "server")
SHM_FAIL = 64 * MiB  # Docker's default /dev/shm
SHM_WARN = 1 * GiB
UNEXPLAINED_USED = 1 * GiB  # memory in use with no process NVML can name
# ledger problems that a doctor check reports itself (when that check could run)
COVERED = {"bf16-unsupported": "bf16", "not-enough-gpus": "gpus", "weights-incomplete": "model"}
P2P_FIX = ('add NCCL_P2P_DISABLE = "1" under [server.env] in config.toml '
           "(one run: qwen-tui --set server.env.NCCL_P2P_DISABLE=1 ...)")
DTYPE_FIX = 'set server.dtype = "float16" in config.toml (one run: qwen-tui --set server.dtype=half ...)'
SHM_FIX = ("docker run --shm-size=16g (or --ipc=host) for a container; on a host: "
           "sudo mount -o remount,size=16G /dev/shm")


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail | skip
    message: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "message": self.message, "fix": self.fix}


# -- the outside world, replaceable in tests -----------------------------------------------------
# (settings, monitor, when, scan): one process scan serves both hooks below within one doctor run
_last_scan: list[Any] = []


def _scan(settings: Settings, monitor: Any) -> Any:
    import time  # only for this check: `doctor` runs each check on its own

    from backend.server import orphans  # only for this check: `doctor` runs each check on its own

    if _last_scan and _last_scan[0] is settings and _last_scan[1] is monitor and \
            time.monotonic() - _last_scan[2] < 3.0:
        return _last_scan[3]
    found = orphans.scan(settings.env, monitor=monitor)
    _last_scan[:] = [settings, monitor, time.monotonic(), found]
    return found


def scan_processes(settings: Settings, monitor: Any) -> list[Any]:
    """Orphans: vLLM and GPU processes that no live qwen-tui supervisor runs (backend.server.orphans)."""
    return list(_scan(settings, monitor).orphans)


def team_servers(settings: Settings, monitor: Any) -> list[Any]:
    """Other live supervisors' servers (teammates', any state dir or user): backend.server.owners.TeamServer."""
    return list(_scan(settings, monitor).servers)


def server_status() -> Mapping[str, Any]:
    from backend.server import client as supervisor_client  # only for this check: `doctor` runs each check on its own

    return supervisor_client.status()


def site_dirs(settings: Settings) -> list[str]:
    """sys.path of the interpreter that runs vLLM (torch loads the nvidia-* wheels' libraries from it)."""
    python = python_for(settings)
    if Path(python).resolve() == Path(sys.executable).resolve():
        return list(sys.path)
    try:
        out = subprocess.run([python, "-c", "import sys; print('\\n'.join(sys.path))"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in out.splitlines() if line]


@dataclass
class Env:
    """Facts from outside. `monitor=None`: a backend.gpu.GpuMonitor is opened (cuda only) and closed."""

    monitor: Any = None
    install: VllmInstall | None = None
    load_library: Callable[[str], Any] = ctypes.CDLL
    site_dirs: Callable[[Settings], list[str]] = site_dirs
    statvfs: Callable[[str], Any] = os.statvfs
    shm_path: str = "/dev/shm"
    bind: Callable[[str, int], OSError | None] = probe_bind
    port_holders: Callable[[int], list[tuple[int, str]]] = listening_pids
    server_status: Callable[[], Mapping[str, Any]] = server_status
    processes: Callable[[Settings, Any], list[Any]] = scan_processes
    servers: Callable[[Settings, Any], list[Any]] = team_servers
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    home: Path = field(default_factory=Path.home)


# -- shared facts ------------------------------------------------------------------------------------
def gib(b: float | None) -> str:
    """GiB to one place; below 0.05 GiB (a demo model's weights) in MiB, never "0.0 GiB"."""
    if b is None:
        return "?"
    return f"{b / (1 << 20):.1f} MiB" if 0 < abs(b) < GiB / 20 else f"{b / GiB:.1f} GiB"


def gb(b: float) -> str:
    """GB to one place; below 0.05 GB in MB (a file of some MB is not "0.0 GB")."""
    return f"{b / 1e6:.1f} MB" if 0 < abs(b) < GB / 20 else f"{b / GB:.1f} GB"


def cc_text(cc: tuple[int, int] | None) -> str:
    return f"{cc[0]}.{cc[1]}" if cc else "?"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class Context:
    def __init__(self, settings: Settings, env: Env) -> None:
        self.settings, self.env = settings, env
        self.server_cfg = settings.server_cfg
        self.device = str(settings.planner_cfg.device or "cuda")
        self.tp = int(self.server_cfg.tensor_parallel_size or 1)
        self.pp = int(self.server_cfg.pipeline_parallel_size or 1)
        self.world = self.tp * self.pp
        self.server_env = {**env.environ, **settings.env}  # what vLLM's processes will see
        self.monitor = env.monitor
        self.results: dict[str, Check] = {}

    @cached_property
    def install(self) -> VllmInstall:
        return self.env.install or detect_install(python_for(self.settings))

    @cached_property
    def status(self) -> dict[str, Any]:
        try:
            return dict(self.env.server_status())
        except Exception as e:  # noqa: BLE001 - an unreadable state file must not stop the doctor
            return {"state": "unknown", "note": f"{type(e).__name__}: {e}"}

    @property
    def ours_running(self) -> bool:
        return in_group(self.status.get("state"), HAS_PROCESS)

    def gpu_skip(self) -> str | None:
        """Why GPU facts are unavailable, or None."""
        if self.device == "cpu":
            return 'planner.device = "cpu": no GPU is used'
        if self.monitor is None or not self.monitor.available():
            return f"no GPU data ({getattr(self.monitor, 'reason', None) or 'NVML not available'})"
        return None

    @cached_property
    def visible(self) -> list[Any]:
        """The monitor's GPUs that CUDA_VISIBLE_DEVICES lets vLLM see, in CUDA order."""
        gpus = list(self.monitor.gpus) if self.gpu_skip() is None else []
        raw = self.server_env.get("CUDA_VISIBLE_DEVICES")
        if raw is None:
            return gpus
        out = []
        for part in (p.strip() for p in str(raw).split(",")):
            match = ([g for g in gpus if g.index == int(part)] if part.isdigit()
                     else [g for g in gpus if part and g.uuid and g.uuid.startswith(part)])
            if not match:
                break  # CUDA stops at the first entry it cannot use
            out.append(match[0])
        return out

    @property
    def used(self) -> list[Any]:
        return self.visible[: self.world]

    @cached_property
    def plan(self) -> tuple[Any, str | None]:
        """(Ledger, None) or (None, why)."""
        # only for this check: `doctor` runs each check on its own
        from backend.ledger import LedgerInputError, plan_from_settings
        from backend.ledger.adapter import gpus_from_monitor

        gpus = None
        if self.gpu_skip() is None:  # our own server's memory is not held against it
            gpus = gpus_from_monitor(self.monitor, with_free=not self.ours_running)
        try:
            led = plan_from_settings(self.settings, gpus=gpus or None, vllm_version=self.install.version,
                                     check_free=not self.ours_running)
            return led, None
        except LedgerInputError as e:
            return None, str(e)
