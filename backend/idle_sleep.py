"""Sleep when idle: `server.sleep_after_idle_s` puts a READY server to sleep after that long with no
running or waiting request, as the flight recorder's /metrics samples say (backend/recorder.py).

Idle needs proof: a fresh sample (within 3 of the recorder's intervals) that shows nothing running or
waiting, and no request finished or token made since the last activity (counters, so a request shorter
than the sampling interval still counts). A server whose /metrics cannot be read is never put to sleep.

Level 1 (weights to host RAM) unless the host's free RAM would not hold the weights (backend/host.py):
then level 2. A sleep that fails is not retried until the server is READY again (a wake, a restart).

Waking on a request is not done: vLLM has no hook that holds a request until /wake_up is done, so it
would take a proxy in front of the server's port, which every request of an awake server pays for.
`z`, `qwen-tui wake`, or a client calling POST /wake_up wakes it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

TICK_S = 1.0


class IdleTimer:
    """When a READY server has been idle for `idle_s`: pure, fed the supervisor's state and the recorder's figures."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = float(idle_s)
        self.ready_since: float | None = None
        self._state: str | None = None
        self.gave_up = False  # a sleep failed: not again until the next READY

    def idle_for(self, state: str, now: float, busy_at: float | None, last: dict[str, Any] | None,
                 fresh_s: float) -> float | None:
        """Seconds idle (None: not idle, or not proven so)."""
        if state != self._state:
            self._state = state
            self.ready_since = now if state == "ready" else None
            self.gave_up = False
        if state != "ready" or self.ready_since is None or self.gave_up:
            return None
        if last is None or now - float(last["t"]) > fresh_s or last["t"] < self.ready_since:
            return None  # no /metrics read since READY, or none lately: idle is not proven
        if (last.get("running") or 0) > 0 or (last.get("waiting") or 0) > 0:
            return None
        return now - max(self.ready_since, busy_at or 0.0)

    def due(self, *args: Any) -> bool:
        idle = self.idle_for(*args)
        return idle is not None and idle >= self.idle_s


def _level(sup: Any) -> int:
    """1, unless the weights would not fit in the host's free RAM (then 2: dropped, reloaded on wake)."""
    try:
        from backend import host  # psutil: only when a sleep is due

        snap = sup.parser.snapshot()
        tp = int(sup.settings.server.get("tensor_parallel_size") or 1)
        return 2 if host.sleep_fit(host.weights_bytes(snap, None, tp), host.sample().ram_available_bytes) else 1
    except Exception:  # noqa: BLE001 - a figure that cannot be read: the default level
        return 1


async def watch(sup: Any, tick_s: float = TICK_S, sleep_call: Any = None) -> None:
    """The supervisor's idle timer task. `sleep_call(sup, request)` defaults to sup.sleep.handle (the real
    POST /sleep); tests pass a fake one."""
    idle_s = sup.settings.server.get("sleep_after_idle_s")
    if not idle_s:
        return
    rec = sup.recorder
    if not sup.sleep.enabled:
        if rec is not None:
            rec.event("note", "server.sleep_after_idle_s is set but server.enable_sleep_mode is not: "
                      "the server is never put to sleep")
        return
    call = sleep_call or sup.sleep.handle
    timer = IdleTimer(float(idle_s))
    while True:
        await asyncio.sleep(tick_s)
        now = time.time()
        if rec is None or sup.sleep.busy or not timer.due(sup.state, now, rec.busy_at, rec.last, 3 * rec.interval):
            continue
        level = await asyncio.to_thread(_level, sup)
        op = await call(sup, {"id": f"idle-{int(now)}", "action": "sleep", "level": level})
        if op.get("ok") and sup.state == "sleeping":
            rec.event("idle_sleep", f"after {idle_s:.0f} s idle: level {level}")
            sup.detail = f"asleep after {idle_s:.0f} s idle; {sup.detail}"
            sup._write_state()
        else:
            timer.gave_up = True
            rec.event("idle_sleep_failed", str(op.get("message") or "")[:300])
