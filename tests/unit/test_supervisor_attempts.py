"""Failure memory across restarts, the never-restarted kinds, and the pids of a dead launch that the
supervisor is still reaping (issue 9). The launched program is a stand-in that prints vLLM's own
lines (from the v0.20.2 H200 run kept in tests/fixtures/vllm-logs/) and exits; not vLLM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import psutil

from backend.logparse import is_permanent
from backend.server import orphans, procs, statefile
from backend.server.launch import Launch, VllmInstall
from backend.server.supervisor import Supervisor
from backend.settings import load
from tests.helpers.supervisor import STAND_IN, GroupOnGpu, engine_pids, until

NO_CACHE = r"""
print("(EngineCore pid=2340) INFO 12-01 07:01:11 [gpu_model_runner.py:4879] Model loading took 27.57 GiB memory and 0.82 seconds", flush=True)
print("(EngineCore pid=2340) INFO 12-01 07:01:22 [gpu_worker.py:440] Available KV cache memory: -5.03 GiB", flush=True)
print("(EngineCore pid=2340) ERROR 12-01 07:01:22 [core.py:1136]     raise ValueError(", flush=True)
print("(EngineCore pid=2340) ERROR 12-01 07:01:22 [core.py:1136] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.", flush=True)
raise SystemExit(1)
"""

# exits with the same transient-looking failure every time: another process holds the GPU memory
SAME_KIND = r"""
print("(EngineCore pid=1) ERROR 12-01 07:01:22 [core.py:1] ValueError: Free memory on device (3.2/23.58 GiB) on startup is less than desired GPU memory utilization (0.9, 21.22 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.", flush=True)
raise SystemExit(1)
"""


def _sup(qhome, program: str, restart: str = "on-failure", *extra: str) -> Supervisor:
    settings = load(None, overrides=["console.stop_timeout=5", "server.port=1",
                                     "console.restart_max_failures=5", *extra])
    launch = Launch([sys.executable, "-c", program], {}, VllmInstall(None, None, sys.executable), [])
    sup = Supervisor(settings, launch, restart=restart)
    sup.gpus = GroupOnGpu(sup)
    return sup


async def test_no_cache_memory_fails_once_and_is_not_restarted(qhome) -> None:
    assert is_permanent("no_cache_memory")
    sup = _sup(qhome, NO_CACHE)
    assert await asyncio.wait_for(sup.run(), 30) == 1
    st = sup.status()
    assert sup.restarts == 0 and st["state"] == "failed"
    assert st["failure"]["kind"] == "no_cache_memory" and "not restarted" in st["detail"]
    # the history says which attempt failed, how, and where its log is
    assert [a["attempt"] for a in st["attempts"]] == [1]
    last = st["last_failure"]
    assert last["kind"] == "no_cache_memory" and last["exit_code"] == 1 and not last["was_ready"]
    assert os.path.exists(last["log_path"]) and "No available memory" in open(last["log_path"]).read()
    on_disk = json.loads(statefile.state_path().read_text())
    assert on_disk["last_failure"]["kind"] == "no_cache_memory"


async def test_the_same_failure_twice_before_ready_stops_the_loop(qhome, monkeypatch) -> None:
    import backend.server.supervisor as sv

    monkeypatch.setattr(sv, "BACKOFF_START_S", 0.05)
    sup = _sup(qhome, SAME_KIND)
    states: list[tuple[str, str]] = []
    sup.on_state = lambda t: states.append((t.state, t.detail))
    assert await asyncio.wait_for(sup.run(), 30) == 1
    kind = sup.status()["last_failure"]["kind"]
    assert kind == "memory_in_use" and not is_permanent(kind)  # what stops the loop is the repetition
    assert sup.restarts == 1 and len(sup.attempts) == 2
    assert states[-1][1].startswith("failed the same way twice: not restarted (memory_in_use: ValueError: Free memory")
    # attempt 1's failure was kept while attempt 2 ran: each attempt has its own log
    assert sup.attempts[0]["log_path"] != sup.attempts[1]["log_path"]


async def test_a_dead_launch_being_reaped_is_published_and_never_an_orphan(qhome, monkeypatch) -> None:
    """For seconds after kill -9 of the API server, its EngineCore is still alive while the
    supervisor stops it: the state file names it, and the orphan scan counts it as owned."""
    seen: dict[str, object] = {}
    real = procs.group_members

    sup = _sup(qhome, STAND_IN, "never")
    sup.gpus = GroupOnGpu(sup)
    import backend.server.orphans as orph

    real_stop = orph.stop_verified

    def slow_stop(pgid, pids, timeout, monitor):  # look at the world while the reap is under way
        data = json.loads(statefile.state_path().read_text())
        seen["state"] = data
        seen["scan"] = orphans.scan({}, monitor=_NoNvml()).pids
        seen["trust"] = statefile.read_live(cleanup=False)[1]
        return real_stop(pgid, pids, timeout, monitor)

    monkeypatch.setattr(orph, "stop_verified", slow_stop)
    # the supervisor runs in this (pytest) process: let the state file's trust take it for one
    real_is = statefile.is_supervisor
    monkeypatch.setattr(statefile, "is_supervisor", lambda pid: pid == os.getpid() or real_is(pid))
    run = asyncio.create_task(sup.run())
    await until(lambda: sup.state == "starting" and len(engine_pids(sup)) == 1)
    engine = engine_pids(sup)[0]
    os.kill(sup.proc.pid, signal.SIGKILL)
    assert await asyncio.wait_for(run, 30) == 1
    assert engine in seen["state"]["reaping_pids"]
    assert seen["state"]["state"] == "stopping" and "cleaning up" in seen["state"]["detail"]  # not final yet
    assert "killed by signal 9 (SIGKILL)" in seen["state"]["detail"]
    assert engine not in seen["scan"], seen["trust"]
    assert sup.status()["reaping_pids"] == []  # done
    assert not psutil.pid_exists(engine) or psutil.Process(engine).status() == psutil.STATUS_ZOMBIE
    assert real is procs.group_members


class _NoNvml:
    reason = "no NVML (test double)"

    def available(self) -> bool:
        return False

    def shutdown(self) -> None:
        pass


def test_the_state_a_supervisor_writes_is_one_its_own_trust_accepts(qhome):
    """Every field the supervisor writes (failure history, sleep mode, reaping) has a type the state
    file's check knows: a new field of a wrong declared type would make every live server untrusted."""
    sup = _sup(qhome, NO_CACHE)
    st = sup.status()
    assert st["sleep_enabled"] in (True, False) and "attempts" in st and "reaping_pids" in st
    assert statefile.type_problem(json.loads(json.dumps(st))) is None
    unknown = set(st) - set(statefile.FIELDS)
    assert not unknown - {"sleep_op"}, f"fields without a declared type: {sorted(unknown)}"
