"""A stand-in vLLM process tree for supervisor tests, an NVML double that sees its group, waiting."""

from __future__ import annotations

import asyncio
import time

from backend.server import procs
from backend.server.supervisor import Supervisor

GIB = 2**30

STAND_IN = r"""
import subprocess, sys, time
print("INFO 11-29 10:00:00 [api_server.py:1] vLLM API server version 0.11.0", flush=True)
child = "import time\nopen('/proc/self/comm','w').write('VLLM::EngineCore')\nwhile True: time.sleep(1)"
subprocess.Popen([sys.executable, "-c", child])
print("INFO 11-29 10:00:01 [core.py:1] waiting for engine", flush=True)
if "--die" in sys.argv:
    time.sleep(0.5)
    print("(APIServer pid=1) ERROR 11-29 10:00:02 [async_llm.py:480] vllm.v1.engine.exceptions."
          "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
          flush=True)
while True:
    time.sleep(1)
"""


class GroupOnGpu:
    """NVML double: every live member of the supervised group holds 4 GiB on GPU 0."""

    reason = None

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup
        self.shut = False

    def available(self) -> bool:
        return True

    def processes_by_gpu(self):
        pgid = self.sup._pgid
        return {0: {pid: 4 * GIB for pid in (procs.group_members(pgid) if pgid else [])}}

    def processes(self, indices=None):
        return dict(self.processes_by_gpu()[0])

    def sample(self):
        from types import SimpleNamespace
        return [SimpleNamespace(memory_used_bytes=GIB + sum(self.processes().values()))]

    def shutdown(self) -> None:
        self.shut = True


async def until(pred, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


def engine_pids(sup: Supervisor) -> list[int]:
    return [p for p in procs.group_members(sup._pgid) if p != sup.proc.pid] if sup._pgid else []
