"""Sleep when idle: `server.sleep_after_idle_s` puts a READY server to sleep after that long with no
running or waiting request, as the flight recorder's /metrics samples say (backend/recorder.py).

Idle needs proof: a fresh sample (within 3 of the recorder's intervals) that shows nothing running or
waiting, and no request finished or token made since the last activity (counters, so a request shorter
than the sampling interval still counts). A server whose /metrics cannot be read is never put to sleep.

Level 1 (weights to host RAM) unless the host's free RAM would not hold the weights (sleep.sleep_fit):
then level 2. A sleep that fails is not retried until the server is READY again (a wake, a restart).

Wake on request, without a proxy: while the server sleeps, its in-flight request count is read every tick
(GET /load: vLLM's --enable-server-load-tracking, which the launch passes with this setting, backend/server/launch.py),
and the recorder's samples go on: a request in flight, a new POST to a /v1/ endpoint (http_requests_total by
handler) or a request running or waiting that was not there when it fell asleep wakes it. The in-flight
count is what catches a client that waits: on the H200, vLLM 0.20.2 held a chat sent to the sleeping
engine without an answer, and http_requests_total counted it only after the client's 120 s timeout
(tests/fixtures/gpu/h200-energy-sleep). Nothing sits in front of the server's port, so an awake server's
requests pay one integer count in vLLM's API process. `z`, `qwen-tui wake`, or POST /wake_up wake it at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from backend.server.sleep import sleep_fit, weights_bytes

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


class RequestWaker:
    """While asleep: has a client asked for a generation since the server fell asleep?"""

    def __init__(self) -> None:
        self.since: float | None = None
        self.base: float | None = None  # POSTs to /v1/ when it fell asleep (the reading just before)

    def due(self, state: str, now: float, reading: Any, in_flight: int | None = None) -> bool:
        """`in_flight`: GET /load's count of requests in vLLM's API process now (None: not read)."""
        if state != "sleeping":
            self.since = self.base = None
            return False
        if self.since is None:
            self.since = now
            self.base = reading.values.get("gen_http", 0.0) if reading is not None else None
            return False
        if in_flight:
            return True
        if reading is None or reading.at < self.since:
            return False
        v = reading.values
        if self.base is None:  # no reading from before the sleep: this first one is the base
            self.base = v.get("gen_http", 0.0)
        return (v.get("gen_http", 0.0) > self.base or (v.get("running") or 0) > 0
                or (v.get("waiting") or 0) > 0)


def in_flight(base_url: str, timeout_s: float = 1.0) -> int | None:
    """vLLM's count of requests in its API process (GET /load), or None where it cannot be read (no load
    tracking, an older vLLM, a server that does not answer)."""
    import httpx  # the supervisor has it loaded already

    try:
        r = httpx.get(base_url.rstrip("/") + "/load", timeout=timeout_s)
        return int(r.json()["server_load"]) if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def _level(sup: Any) -> int:
    """1, unless the weights would not fit in the host's free RAM (then 2: dropped, reloaded on wake)."""
    try:
        import psutil  # only when a sleep is due

        snap = sup.parser.snapshot()
        tp = int(sup.settings.server_cfg.tensor_parallel_size or 1)
        return 2 if sleep_fit(weights_bytes(snap, None, tp), psutil.virtual_memory().available) else 1
    except Exception:  # noqa: BLE001 - a figure that cannot be read: the default level
        return 1


async def watch(sup: Any, tick_s: float = TICK_S, sleep_call: Any = None) -> None:
    """The supervisor's idle timer task. `sleep_call(sup, request)` defaults to sup.sleep.handle (the real
    POST /sleep); tests pass a fake one."""
    idle_s = sup.settings.server_cfg.sleep_after_idle_s
    if not idle_s:
        return
    rec = sup.recorder
    if not sup.sleep.enabled:
        if rec is not None:
            rec.event("note", "server.sleep_after_idle_s is set but server.enable_sleep_mode is not: "
                      "the server is never put to sleep")
        return
    call = sleep_call or sup.sleep.handle
    timer, waker = IdleTimer(float(idle_s)), RequestWaker()
    while True:
        await asyncio.sleep(tick_s)
        now = time.time()
        if rec is None or sup.sleep.busy:
            continue
        load = await asyncio.to_thread(in_flight, rec.status()[1]) if sup.state == "sleeping" else None
        if waker.due(sup.state, now, rec.prev, load):
            op = await call(sup, {"id": f"wake-{int(now)}", "action": "wake"})
            rec.event("wake_on_request" if op.get("ok") else "wake_on_request_failed",
                      str(op.get("message") or "")[:300])
            waker.since = None
            continue
        if not timer.due(sup.state, now, rec.busy_at, rec.last, 3 * rec.interval):
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
