"""backend/daemon_threads.py: calls run on daemon threads, idle ones are reused, calls that run at
once get threads of their own, errors reach the caller."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from backend import daemon_threads


async def test_calls_reuse_idle_daemon_threads_and_run_together_when_they_must():
    loop = asyncio.get_running_loop()
    executor = daemon_threads.DaemonExecutor()
    loop.set_default_executor(executor)

    def who() -> tuple[str, bool]:
        t = threading.current_thread()
        return t.name, t.daemon

    names = [await asyncio.to_thread(who) for _ in range(5)]
    assert all(daemon for _, daemon in names)
    assert len({n for n, _ in names}) == 1  # one thread, reused: no Thread.start per call

    gate = threading.Barrier(3, timeout=5)  # three calls that can only finish together

    def meet() -> str:
        gate.wait()
        return threading.current_thread().name

    started = time.perf_counter()
    together = await asyncio.gather(*(asyncio.to_thread(meet) for _ in range(3)))
    assert len(set(together)) == 3 and time.perf_counter() - started < 5

    def boom() -> None:
        raise ValueError("from the thread")

    with pytest.raises(ValueError, match="from the thread"):
        await asyncio.to_thread(boom)
    assert (await asyncio.to_thread(who))[1]


def test_an_idle_thread_ends_after_idle_s(monkeypatch):
    monkeypatch.setattr(daemon_threads, "IDLE_S", 0.05)
    executor = daemon_threads.DaemonExecutor()
    before = threading.active_count()
    assert executor.submit(lambda: 7).result(timeout=5) == 7
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.02)
    assert threading.active_count() == before
    assert executor.submit(lambda: 8).result(timeout=5) == 8  # a new thread when none is idle
