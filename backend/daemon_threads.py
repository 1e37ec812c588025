"""An executor whose threads never keep the process alive.

`asyncio.to_thread` runs on the loop's default ThreadPoolExecutor; its threads are not daemons and
the interpreter joins them at exit. A blocking call still running when the console quits (a stop
waiting for a supervisor, a slow read) then kept the process alive after its screen was gone,
and SIGTERM only reached a handler of a loop that no longer ran. Here every call runs on a daemon
thread: what is still running at exit is abandoned, not waited for.

Idle threads are kept for the next call (IDLE_S): `Thread.start()` waits until the new thread runs,
which on a busy machine held the event loop 50-120 ms on every poll that started one.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

IDLE_S = 60.0  # an idle thread ends after this


class DaemonExecutor(ThreadPoolExecutor):
    """A ThreadPoolExecutor in type (asyncio requires one) that runs each call on a daemon thread,
    reusing idle ones; never more threads than calls running at once."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self._closed = False
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._count = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self._closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: Future[Any] = Future()
        with self._lock:
            start = self._idle == 0
            if start:
                self._count += 1
            else:
                self._idle -= 1  # that thread is taken
        self._calls.put((future, fn, args, kwargs))
        if start:
            name = f"call-{self._count}-{getattr(fn, '__name__', 'fn')}"
            threading.Thread(target=self._serve, name=name, daemon=True).start()
        return future

    def _serve(self) -> None:
        while True:
            try:
                future, fn, args, kwargs = self._calls.get(timeout=IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0 and self._calls.empty():
                        self._idle -= 1
                        return
                continue  # a call was handed to this thread meanwhile
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as e:  # handed to the awaiting coroutine
                    future.set_exception(e)
            del future, fn, args, kwargs
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed = True  # never waits: the threads are daemons


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Make `asyncio.to_thread` / `run_in_executor(None, …)` on this loop use daemon threads."""
    loop.set_default_executor(DaemonExecutor())
