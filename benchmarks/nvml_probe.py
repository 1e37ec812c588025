"""Probe backend.gpu.GpuMonitor on a real NVIDIA driver.

    python3 benchmarks/nvml_probe.py OUT.json

Prints and writes: the static facts, one set of samples, the NVML process list, which fields came
back Not Supported, and timings (median/p90/max ms over 100 calls of sample(), processes() and
both). Cross-checks memory against v1 and nvidia-smi when those are available. Exit status 1 when
NVML is unavailable (the JSON then says why).
"""

from __future__ import annotations

import json
import platform
import shutil
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.gpu import GpuMonitor  # noqa: E402

N = 100


def timed(fn: Callable[[], Any], n: int = N) -> dict[str, float]:
    wall, cpu = [], []
    for _ in range(n):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - w0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    wall.sort()
    return {
        "n": n,
        "median": round(statistics.median(wall), 4),
        "p90": round(wall[int(n * 0.9) - 1], 4),
        "max": round(wall[-1], 4),
        "cpu_median": round(statistics.median(cpu), 4),
    }


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def nvidia_smi() -> list[str] | str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    query = "index,memory.used,memory.total,power.draw,temperature.gpu,fan.speed,pcie.link.gen.current"
    try:
        out = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    return out.stdout.strip().splitlines() or out.stderr.strip()


def cross_checks(mon: GpuMonitor) -> dict[str, Any]:
    """Raw pynvml readings to compare with what GpuMonitor reports."""
    out: dict[str, Any] = {}
    try:
        import pynvml

        h = pynvml.nvmlDeviceGetHandleByIndex(mon.gpus[0].index)
        v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
        out["memory_v1_used_bytes"] = v1.used
        # nvidia-ml-py's NVML_P2P_CAPS_INDEX_READ is the tuple (0,): show what passing it does.
        try:
            out["p2p_self_with_pynvml_constant"] = pynvml.nvmlDeviceGetP2PStatus(h, h, pynvml.NVML_P2P_CAPS_INDEX_READ)
        except Exception as exc:  # noqa: BLE001
            out["p2p_self_with_pynvml_constant"] = f"{type(exc).__name__}: {exc}"
        try:
            out["p2p_self_with_int_0"] = pynvml.nvmlDeviceGetP2PStatus(h, h, 0)
        except Exception as exc:  # noqa: BLE001
            out["p2p_self_with_int_0"] = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def procs_scan() -> dict[str, Any] | None:
    try:
        from backend.server import procs
    except ImportError as exc:  # psutil missing on that machine
        return {"error": str(exc)}
    found = procs.find_vllm_processes()
    return {"found": [p.pid for p in found], "timing_ms": timed(procs.find_vllm_processes, 20)}


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    mon = GpuMonitor()
    result: dict[str, Any] = {
        "host": platform.node(),
        "python": platform.python_version(),
        "nvidia_ml_py": version("nvidia-ml-py"),
        "constructor_ms": round((time.perf_counter() - t0) * 1000, 3),
        "nvml_init_ms": round(mon.init_seconds * 1000, 3) if mon.init_seconds is not None else None,
        "info": mon.info_dict(),
    }
    if mon.available():
        mon.sample()  # first call outside the timing
        result["samples"] = [s.to_dict() for s in mon.sample()]
        result["processes"] = {str(k): v for k, v in mon.processes().items()}
        result["unsupported"] = mon.unsupported
        result["timing_ms"] = {
            "sample": timed(mon.sample),
            "processes": timed(mon.processes),
            "sample_and_processes": timed(lambda: (mon.sample(), mon.processes())),
        }
        result["cross_check"] = {"pynvml": cross_checks(mon), "nvidia_smi": nvidia_smi()}
        result["procs_scan"] = procs_scan()
    mon.shutdown()
    text = json.dumps(result, indent=1)
    print(text)
    Path(sys.argv[1]).write_text(text + "\n")
    return 0 if result["info"]["available"] else 1


if __name__ == "__main__":
    sys.exit(main())
