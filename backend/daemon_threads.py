"""An executor whose threads never keep the process alive.

`asyncio.to_thread` runs on the loop's default ThreadPoolExecutor; its threads are not daemons and
the interpreter joins them at exit. A blocking call still running when the console quits (a stop
waiting for a supervisor, a slow read) then kept the process alive after its screen was gone,
and SIGTERM only reached a handler of a loop that no longer ran. Here each call gets a daemon thread:
what is still running at exit is abandoned, not waited for.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class DaemonExecutor(ThreadPoolExecutor):
    """A ThreadPoolExecutor in type (asyncio requires one) that runs each call on a daemon thread."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self._closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: Future[Any] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:  # handed to the awaiting coroutine
                future.set_exception(e)

        threading.Thread(target=run, name=f"call-{getattr(fn, '__name__', 'fn')}", daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed = True  # never waits: the threads are daemons


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Make `asyncio.to_thread` / `run_in_executor(None, …)` on this loop use daemon threads."""
    loop.set_default_executor(DaemonExecutor())
