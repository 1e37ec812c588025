"""The supervisor's hook into the flight recorder: its state changes land in history.db beside the
samples, through the recorder's own thread (a stand-in process tree, not vLLM; see test_supervisor.py)."""

from __future__ import annotations

import asyncio
import time

from backend import history, recorder
from tests.helpers.supervisor import engine_pids, until
from tests.unit.test_supervisor import _supervisor


async def test_a_supervisors_states_are_recorded_and_its_loop_never_waits_on_the_store(qhome) -> None:
    sup = _supervisor(qhome)
    run = asyncio.create_task(sup.run())
    await until(lambda: sup.state == "starting" and len(engine_pids(sup)) == 1)
    assert sup.recorder is not None and sup.recorder._thread.is_alive()
    t0 = time.perf_counter()
    for _ in range(100):
        sup._set("starting", "again")  # each a state-file write and a queue put: never a SQLite write here
    per_set = (time.perf_counter() - t0) / 100
    sup.request_stop()
    assert await asyncio.wait_for(run, 30) == 0
    assert not sup.recorder._thread.is_alive()  # stopped with the supervisor, its queue written out
    kinds = [e["kind"] for e in history.load(recorder.db_path(sup.state_path.parent), 3600).events]
    assert kinds[0] == "starting" and kinds[-2:] == ["stopping", "stopped"] and len(kinds) == 1 + 100 + 2
    assert "died" not in kinds  # a stop that was asked for is not a death
    assert per_set < 0.05, per_set


async def test_a_kill_9_is_recorded_as_died_then_failed(qhome) -> None:
    import os
    import signal

    sup = _supervisor(qhome)
    run = asyncio.create_task(sup.run())
    await until(lambda: sup.state == "starting" and len(engine_pids(sup)) == 1)
    os.kill(sup.proc.pid, signal.SIGKILL)
    assert await asyncio.wait_for(run, 30) == 1  # restart="never"
    kinds = [e["kind"] for e in history.load(recorder.db_path(sup.state_path.parent), 3600).events]
    assert kinds[0] == "starting" and "died" in kinds and kinds[-1] == "failed", kinds
    assert "stopping" not in kinds  # nobody asked it to stop
