"""Prove the stop/orphan GPU checks on a real NVIDIA driver (run on a GPU machine).

    python3 benchmarks/gpu_release_probe.py [OUT.json]

Starts a process tree shaped like vLLM's in its own session: a parent titled like the API server
holding GPU memory, and a child titled ``VLLM::EngineCore`` holding more (allocated through the CUDA
driver API with ctypes: no torch needed). Then, with the real NVML:
1. ``orphans.scan`` must list both pids with the memory NVML reports;
2. ``orphans.kill`` of the child alone (a targeted kill) must leave the parent running and report
   the child's memory released;
3. ``orphans.stop_verified`` on the group must stop the rest and report its memory released.
Prints one JSON object (and writes it to OUT.json); exit 1 when a check fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.gpu import GpuMonitor  # noqa: E402
from backend.server import orphans, procs  # noqa: E402

MIB = 2**20

# Allocate MiB on GPU 0 through the driver API, say so, start the children listed, sleep.
HOLDER = r"""
import ctypes, json, subprocess, sys, time
spec = json.loads(sys.argv[1])
if spec.get("title"):
    open("/proc/self/comm", "w").write(spec["title"])
cuda = ctypes.CDLL("libcuda.so.1")
def ok(rc, what):
    if rc != 0:
        raise SystemExit(f"{what} failed: CUresult {rc}")
ok(cuda.cuInit(0), "cuInit")
dev = ctypes.c_int()
ok(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p()
ok(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
ptr = ctypes.c_uint64()
ok(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(spec["mib"] << 20)), "cuMemAlloc_v2")
for child in spec.get("children", []):
    subprocess.Popen([sys.executable, "-c", sys.argv[2], json.dumps(child), sys.argv[2]])
print("held", flush=True)
while True:
    time.sleep(1)
"""


def main() -> int:
    out: dict = {"checks": {}}
    mon = GpuMonitor([0])
    if not mon.available():
        out["error"] = mon.reason
        print(json.dumps(out, indent=1))
        return 1
    spec = {"mib": 1024, "children": [{"title": "VLLM::EngineCore", "mib": 2048}]}
    api = subprocess.Popen([sys.executable, "-c", HOLDER, json.dumps(spec), HOLDER],
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    pgid = api.pid
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(mon.processes()) < 2:
            time.sleep(0.2)
        members = procs.group_members(pgid)
        out["group"] = members
        out["nvml_processes"] = {str(k): v for k, v in mon.processes().items()}
        out["used_before_mib"] = round((orphans.gpu_used(mon) or 0) / MIB)
        engine = next((p for p in members if p != api.pid), None)
        out["pids_match_nvml"] = bool(set(members) & set(mon.processes()))

        found = orphans.scan({}, monitor=mon)
        listed = {p.pid: p for p in found.processes}
        out["scan"] = [orphans.describe(p) for p in found.processes]
        out["checks"]["scan_lists_engine_core_by_title"] = engine in listed and listed[engine].role == "engine_core"
        out["checks"]["scan_attributes_gpu_memory"] = (
            engine in listed and (listed[engine].gpu_bytes or 0) >= 2048 * MIB) if out["pids_match_nvml"] else None

        t0 = time.monotonic()
        killed = orphans.kill([engine], found, monitor=mon)
        out["targeted_kill"] = {"summary": killed.summary(), "release": killed.release.to_dict(),
                                "seconds": round(time.monotonic() - t0, 3)}
        import psutil

        gone = not psutil.pid_exists(engine) or psutil.Process(engine).status() == psutil.STATUS_ZOMBIE
        out["checks"]["targeted_kill_leaves_parent"] = api.poll() is None and gone
        out["checks"]["targeted_kill_release_ok"] = killed.ok and (
            bool(killed.release.held_before) or not out["pids_match_nvml"])

        done = orphans.stop_verified(pgid, procs.group_members(pgid), 10.0, mon, popen=api)
        out["group_stop"] = {"summary": done.summary(), "release": done.release.to_dict()}
        out["checks"]["group_stop_ok"] = done.ok and procs.group_members(pgid) == []
        out["used_after_mib"] = round((orphans.gpu_used(mon) or 0) / MIB)
    finally:
        try:
            os.killpg(pgid, 9)
        except ProcessLookupError:
            pass
        mon.shutdown()
    out["ok"] = all(v is not False for v in out["checks"].values())
    text = json.dumps(out, indent=1)
    print(text)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
