"""Sleep and wake: free the GPUs without a cold restart (vLLM's sleep mode), owned by the supervisor.

vLLM 0.20 (vllm/entrypoints/serve/sleep/api_router.py) serves these only when the server was started with
`--enable-sleep-mode` and its environment has VLLM_SERVER_DEV_MODE=1 (server.enable_sleep_mode adds both):

    POST /sleep?level=1|2   200 (an empty body in 0.20; later builds answer {"status": "sleeping", ...})
                            level 1: weights offloaded to CPU RAM, KV cache dropped; level 2: both dropped
    POST /wake_up           200 (empty in 0.20; later {"status": "awake" | "sleeping", "tags": ...})
    GET  /is_sleeping       {"is_sleeping": true | false}

/health keeps answering 200 while the engine sleeps (it only asks whether the engine is alive). vLLM's CPU
build refuses the flag at start ("Sleep mode is not supported on current platform"): build_launch says so.

Who does what: a client (`qwen-tui sleep`, `wake`, the console's key) writes a request file beside the state
file (control.json: {"id", "action", "level"}) and sends SIGUSR1 to the supervisor; the supervisor takes the
request in its asyncio loop (SleepControl.handle) and calls the endpoints itself, so one process owns every
transition: ready -> sleeping -> ready. The outcome is in the state file: `sleep_op` (this request's id,
ok, message, figures) beside `sleep_level`, `slept_at`, `gpu_memory_freed_bytes` and `wake_seconds`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from backend.server import statefile
from backend.server.status import IDLE, in_group
from backend.settings import Settings

ACTIONS = ("sleep", "wake")
LEVELS = (1, 2)
CALL_TIMEOUT_S = 300.0  # level 1 copies the weights to pinned CPU memory: seconds for 30 GB, not minutes
CONFIRM_S = 10.0  # how long /is_sleeping may take to agree after the call returned
CONTROL_SIGNAL = signal.SIGUSR1
GiB = 1 << 30
# pinned host memory beyond the weights themselves (allocator rounding, the CUDA host pool): a margin,
# not a measurement; the warning says "about"
SLEEP_MARGIN = 1.05


def weights_bytes(parsed: dict[str, Any] | None, plan: dict[str, Any] | None, tp: int = 1) -> int | None:
    """The whole model's weights: the log's per-rank figure times the ranks, else the ledger's plan."""
    gib = (parsed or {}).get("weights_gib")
    if isinstance(gib, (int, float)) and gib > 0:
        return int(gib * GiB * max(1, tp))
    b = (plan or {}).get("weights_bytes")
    return int(b) if isinstance(b, (int, float)) and b > 0 else None


def sleep_fit(weights: int | None, available: int, asleep_level: int | None = None) -> str | None:
    """A warning when a level-1 sleep would not fit in the RAM available now; None when it fits or is
    unknown. While asleep at level 1 the weights are already in RAM: nothing to warn about."""
    if weights is None or asleep_level == 1:
        return None
    need = int(weights * SLEEP_MARGIN)
    if need <= available:
        return None
    return (f"level-1 sleep needs about {need / GiB:.1f} GiB of host RAM for the weights; "
            f"{available / GiB:.1f} GiB is available: use level 2 (weights dropped, reloaded on wake)")


class SleepError(Exception):
    """A sleep or wake that could not be done; the message says why and what to do."""


def request_path(state_path: Path | None = None) -> Path:
    return (state_path or statefile.state_path()).with_name("control.json")


def write_request(action: str, level: int | None = None, state_path: Path | None = None) -> str:
    """Write one request atomically (a newer one replaces an unread older one); returns its id."""
    rid = uuid.uuid4().hex[:12]
    path = request_path(state_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"id": rid, "action": action, "level": level, "at": time.time()}), encoding="utf-8")
    os.replace(tmp, path)
    return rid


def take_request(state_path: Path | None = None) -> dict[str, Any] | None:
    """Read and remove the pending request (None when there is none or it is unreadable)."""
    path = request_path(state_path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    finally:
        try:
            path.unlink()
        except OSError:
            pass
    return data if isinstance(data, dict) else None


def gpu_used_bytes(gpus: Any) -> int | None:
    """Memory used on the monitored GPUs, summed (NVML), or None without NVML."""
    if gpus is None or not gpus.available():
        return None
    used = [s.memory_used_bytes for s in gpus.sample()]
    return sum(used) if used and None not in used else None


def _gib(b: int | None) -> str:
    return "?" if b is None else f"{b / GiB:.1f} GiB"


class SleepControl:
    """The sleep/wake half of one supervisor: its figures, and the one transition in flight."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.busy: str | None = None  # "sleep" / "wake" while its call runs: /health misses are not failures
        self.level: int | None = None
        self.slept_at: float | None = None
        self.freed_bytes: int | None = None
        self.wake_seconds: float | None = None
        self.op: dict[str, Any] | None = None

    def reset(self) -> None:
        """A new launch starts awake."""
        self.busy = self.level = self.slept_at = None

    def fields(self, state: str) -> dict[str, Any]:
        """The keys `status --json` adds (sleep_level and slept_at only while asleep)."""
        asleep = state == "sleeping"
        return {"sleep_enabled": self.enabled, "sleep_level": self.level if asleep else None,
                "slept_at": self.slept_at if asleep else None,
                "gpu_memory_freed_bytes": self.freed_bytes, "wake_seconds": self.wake_seconds,
                "sleep_op": self.op}

    async def handle(self, sup: Any, req: dict[str, Any]) -> dict[str, Any]:
        """Do one request for the supervisor `sup` (its settings, gpus, state and _set); never raises."""
        action, level = req.get("action"), req.get("level") or 1
        op: dict[str, Any] = {
            "id": req.get("id"), "action": action, "level": level if action == "sleep" else self.level,
            "ok": None, "message": "", "started_at": time.time(), "seconds": None,
            "gpu_memory_before_bytes": None, "gpu_memory_after_bytes": None}
        why = self._refusal(sup.state, action, level)
        if why is not None:
            op.update(ok=why == "", message=why or f"already {'asleep' if action == 'sleep' else 'awake'}",
                      seconds=0.0)
            return self._publish(sup, op)
        self.busy = action
        self.op = op
        sup._write_state()
        try:
            async with _client(sup.settings) as client:
                if action == "sleep":
                    await self._sleep(sup, client, level, op)
                else:
                    await self._wake(sup, client, op)
        except SleepError as e:
            op.update(ok=False, message=str(e))
        except Exception as e:  # noqa: BLE001 - a transition must never take the supervisor down
            op.update(ok=False, message=f"{type(e).__name__}: {e}")
        finally:
            self.busy = None
            op["seconds"] = round(time.time() - float(op["started_at"]), 3)
        return self._publish(sup, op)

    def _refusal(self, state: str, action: str | None, level: Any) -> str | None:
        """Why this request is not done: a message, "" for a no-op (already so), None to go ahead."""
        if action not in ACTIONS:
            return f"unknown request {action!r} (known: {', '.join(ACTIONS)})"
        if self.busy:
            return f"busy: a {self.busy} is in progress"
        if action == "sleep" and level not in LEVELS:
            return f"sleep level {level!r} is not one of 1, 2"
        if not self.enabled:
            return ("sleep mode is off for this server: serve it with server.enable_sleep_mode = true "
                    "(--set server.enable_sleep_mode=true); that needs a restart")
        if action == "sleep" and state == "sleeping":
            return "" if level == self.level else f"already asleep at level {self.level}: wake it first"
        if action == "wake" and state == "ready":
            return ""
        want = "ready" if action == "sleep" else "sleeping"
        if state != want:
            return f"the server is {state}: {action} needs it {want.upper()}"
        return None

    def _publish(self, sup: Any, op: dict[str, Any]) -> dict[str, Any]:
        self.op = op
        sup._write_state()
        return op

    async def _sleep(self, sup: Any, client: httpx.AsyncClient, level: int, op: dict[str, Any]) -> None:
        op["gpu_memory_before_bytes"] = await asyncio.to_thread(gpu_used_bytes, sup.gpus)
        await _post(client, "/sleep", {"level": str(level)})
        await _confirm(client, True)
        op["gpu_memory_after_bytes"] = after = await asyncio.to_thread(gpu_used_bytes, sup.gpus)
        before = op["gpu_memory_before_bytes"]
        self.freed_bytes = before - after if before is not None and after is not None else None
        self.level, self.slept_at = level, time.time()
        took = time.time() - op["started_at"]
        freed = f"{_gib(self.freed_bytes)} of GPU memory freed" if self.freed_bytes is not None \
            else "GPU memory not measured (no NVML)"
        op.update(ok=True, message=f"asleep (level {level}): {freed} in {took:.1f} s",
                  gpu_memory_freed_bytes=self.freed_bytes)
        sup._set("sleeping", f"level {level}: {freed}; `qwen-tui wake` brings it back")

    async def _wake(self, sup: Any, client: httpx.AsyncClient, op: dict[str, Any]) -> None:
        op["gpu_memory_before_bytes"] = await asyncio.to_thread(gpu_used_bytes, sup.gpus)
        t0 = time.perf_counter()
        await _post(client, "/wake_up", {})
        await _confirm(client, False)
        self.wake_seconds = round(time.perf_counter() - t0, 3)
        op["gpu_memory_after_bytes"] = await asyncio.to_thread(gpu_used_bytes, sup.gpus)
        level, self.level, self.slept_at = self.level, None, None
        op.update(ok=True, message=f"awake in {self.wake_seconds:.1f} s (after a level {level} sleep)",
                  wake_seconds=self.wake_seconds)
        sup._health_fail_since = None
        sup._set("ready", f"woke in {self.wake_seconds:.1f} s from a level {level} sleep")


def _client(settings: Settings) -> httpx.AsyncClient:
    from backend.httpclient import async_client  # httpx only once a request is made: start-up

    # the key from the key file, $QWEN_TUI_API_KEY or the config, as every console request sends it
    return async_client(settings.base_url, settings.api_key, timeout=httpx.Timeout(CALL_TIMEOUT_S, connect=3.0))


async def _post(client: httpx.AsyncClient, path: str, params: dict[str, str]) -> None:
    try:
        r = await client.post(path, params=params)
    except httpx.HTTPError as e:
        raise SleepError(f"POST {path} failed: {type(e).__name__}: {e}") from None
    if r.status_code == 404:
        raise SleepError(f"POST {path}: 404, the server has no sleep endpoints (it needs --enable-sleep-mode and "
                         "VLLM_SERVER_DEV_MODE=1 in its environment: server.enable_sleep_mode = true, then restart)")
    if r.status_code != 200:
        raise SleepError(f"POST {path}: HTTP {r.status_code}: {r.text[:300]}")


async def is_sleeping(client: httpx.AsyncClient) -> bool | None:
    try:
        r = await client.get("/is_sleeping", timeout=5.0)
        return bool(r.json()["is_sleeping"]) if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


async def _confirm(client: httpx.AsyncClient, asleep: bool) -> None:
    """Until /is_sleeping says `asleep` (vLLM 0.20's comment: the call may return before it is done)."""
    deadline = time.monotonic() + CONFIRM_S
    while True:
        got = await is_sleeping(client)
        if got is asleep:
            return
        if time.monotonic() > deadline:
            raise SleepError(f"/is_sleeping still says {got} {CONFIRM_S:.0f} s after the call")
        await asyncio.sleep(0.1)


# -- the client's side ---------------------------------------------------------------------------------
def request(action: str, level: int | None = None, timeout: float = CALL_TIMEOUT_S + 30) -> dict[str, Any]:
    """Ask the running supervisor to sleep or wake its server and wait for the answer: the `sleep_op`
    record ({"ok", "message", ...}). Raises SleepError when there is nobody to ask or no answer comes."""
    data, why = statefile.read_live(cleanup=False)
    if data is None or in_group(data.get("state"), IDLE):
        raise SleepError("no server is running" + (f" ({why})" if why else "") + ": `qwen-tui serve` starts one")
    if "sleep_enabled" not in data:  # SIGUSR1 would kill a supervisor that has no handler for it
        raise SleepError("this server's supervisor predates sleep/wake (an older qwen-tui started it): "
                         "restart it (`qwen-tui stop`, then serve)")
    if not data.get("sleep_enabled"):
        raise SleepError("sleep mode is off for this server: serve it with server.enable_sleep_mode = true "
                         "(--set server.enable_sleep_mode=true); that needs a restart")
    rid = write_request(action, level)
    try:
        os.kill(int(data["supervisor_pid"]), CONTROL_SIGNAL)
    except (ProcessLookupError, PermissionError, TypeError, ValueError) as e:
        raise SleepError(f"cannot signal the supervisor (pid {data.get('supervisor_pid')}): {e}") from None
    deadline = time.time() + timeout
    while time.time() < deadline:
        now = statefile.read() or {}
        op = now.get("sleep_op") or {}
        if op.get("id") == rid and op.get("ok") is not None:
            from backend.events import record_event  # only once an answer came

            record_event(action, op.get("message"), ok=op.get("ok"), level=level)
            return dict(op, state=now.get("state"))
        if not statefile.pid_matches(data.get("supervisor_pid"), data.get("supervisor_create_time")):
            raise SleepError("the supervisor exited before it answered")
        time.sleep(0.1)
    raise SleepError(f"no answer from the supervisor within {timeout:.0f} s")
