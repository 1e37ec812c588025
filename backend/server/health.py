"""The supervisor's /health watch, apart from its launch and stop: READY needs proof, and a READY server can die."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from backend.server import statefile

if TYPE_CHECKING:  # types only; none of these imports this module
    from backend.logparse import LogParser
    from backend.server.launch import Launch
    from backend.server.sleep import SleepControl
    from backend.settings import Settings


class Supervisor(Protocol):
    """What the watch reads and writes of backend.server.supervisor.Supervisor (a Protocol, not an
    import: the supervisor imports this module, and the house has no import circle)."""
    failure: dict[str, Any] | None
    ready_at: float | None
    probe: dict[str, Any] | None
    served_models: list[str]
    _health_fail_since: float | None

    @property
    def settings(self) -> Settings: ...
    @property
    def launch(self) -> Launch: ...
    @property
    def proc(self) -> Any: ...  # a subprocess, or an adopted server's stand-in
    @property
    def state(self) -> str: ...
    @property
    def detail(self) -> str: ...
    @property
    def state_path(self) -> Path: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def adopted_argv(self) -> list[str] | None: ...
    @property
    def parser(self) -> LogParser: ...
    @property
    def sleep(self) -> SleepControl: ...
    @property
    def _launch_failed(self) -> asyncio.Event: ...
    @property
    def _tail(self) -> Iterable[str]: ...
    def _set(self, state: str, detail: str = "") -> None: ...

STARTING_POLL_S = 0.1
# the readiness probe (probe): tokens asked for, and how long the first generation may take
PROBE_TOKENS = 2
PROBE_TIMEOUT_S = 60.0
NOT_GENERATING_FIX = ("the server answers /health but does not generate: read the log's last lines (in the context); "
                      "with tensor parallel on GPUs this is often a broken all-reduce: check P2P "
                      "(`qwen-tui doctor --p2p`) and try NCCL_P2P_DISABLE = \"1\" in [server.env]")


async def watch(sup: Supervisor) -> None:
    """Poll /health while the launch's process runs: READY once it is proved, failed when it stops answering."""
    interval = float(sup.settings.console_cfg.health_interval_s)
    grace = float(sup.settings.console_cfg.health_grace_s)
    from backend.httpclient import async_client  # httpx only once a request is made: start-up

    # the key this launch was given (never from argv), as the console's own requests send it
    async with async_client(sup.settings.base_url, sup.launch.secret_env.get("VLLM_API_KEY"),
                            timeout=httpx.Timeout(3.0)) as client:
        while sup.proc and sup.proc.returncode is None:
            ok = False
            try:
                ok = (await client.get("/health")).status_code == 200
            except httpx.HTTPError:
                pass
            now = time.time()
            if ok and sup.state == "starting":
                # READY only from the process this supervisor started: it holds the listening
                # socket, and /v1/models serves the configured name (one loopback request)
                foreign = await asyncio.to_thread(foreign_listener, sup)
                if foreign:
                    sup.failure = {"kind": "port_in_use", "message": f"port {sup.settings.server_cfg.port}"
                                   f" is answered by {foreign}, not by the server this supervisor started",
                                   "fix": "stop that process, or pick another port "
                                          f"(--set server.port={int(sup.settings.server_cfg.port) + 1})"}
                    sup._launch_failed.set()
                    return
                await fetch_models(sup, client)
                if sup.adopted_argv is not None and sup.served_models:  # its own settings' name
                    sup.ready_at = now
                    sup._set("ready", sup.detail)
                elif sup.settings.served_name in sup.served_models:
                    # usable means it generates: /health and /v1/models answer before a broken
                    # all-reduce (TP>1) or engine shows; one tiny completion proves the whole path
                    if not await probe(sup, client):
                        sup._launch_failed.set()
                        return
                    now = time.time()
                    sup.ready_at = now
                    took = now - (sup.started_at or now)
                    sup._set("ready", f"{took:.1f} s after launch")
                    from backend.server import startup_history  # the next start of these settings expects it

                    phases = {ph: d for ph, _, d in sup.parser.phase_durations() if d is not None}
                    await asyncio.to_thread(startup_history.record, statefile.argv_hash(sup.launch.argv), took,
                                            sup.state_path.parent / "startups.json", phases)
            elif ok:
                sup._health_fail_since = None
            elif sup.state == "ready" and not sup.sleep.busy:  # asleep, or going to sleep: not failed
                sup._health_fail_since = sup._health_fail_since or now
                if now - sup._health_fail_since > grace:
                    sup.failure = {"kind": "engine_dead", "message": f"/health failing for {grace:.0f} s",
                                   "fix": HEALTH_FIX}
                    sup._launch_failed.set()
                    return
            # while starting, a refused connection on loopback costs microseconds: poll often,
            # so READY follows /health's first 200 closely (benchmarks/bench_ready_latency.py)
            await asyncio.sleep(STARTING_POLL_S if sup.state == "starting" else interval)


# a READY server whose /health stops answering 200: a dead engine says why in the log, a hung or
# stopped process says nothing there (a SIGSTOPped API server was "see the log" with nothing to see)
HEALTH_FIX = ("a dead engine says why in the log's last lines; a hung or stopped (SIGSTOP) process says nothing "
              "there; the server is restarted if console.restart allows")


def foreign_listener(sup: Supervisor) -> str | None:
    """None when a process of this launch's tree listens on the port; else who does."""
    import psutil  # start-up: the console's first frame does not need it

    # only on this path (stop, reap, a foreign listener): the supervisor starts quickly
    from backend.server import owners, procs

    port = int(sup.settings.server_cfg.port)
    tree = [sup.proc.pid, *procs.descendants(sup.proc.pid)] if sup.proc else []
    for pid in tree:
        try:
            conns = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns):
            return None
    holders = owners.port_holders(port)
    return ", ".join(f"pid {pid} {name}" for pid, name in holders) or "a process of another user"


async def probe(sup: Supervisor, client: httpx.AsyncClient) -> bool:
    """One completion of PROBE_TOKENS tokens (ignore_eos: a random demo model may end at once) within
    PROBE_TIMEOUT_S; its counts go to the state file, so the figures shown leave it out
    (backend.metrics.without_probe). False, with the failure set, when no token comes back."""
    body = {"model": sup.settings.served_name, "prompt": "Hello", "max_tokens": PROBE_TOKENS,
            "temperature": 0, "ignore_eos": True}
    t0 = time.monotonic()
    why: str | None = None
    usage: dict[str, Any] = {}
    try:
        resp = await client.post("/v1/completions", json=body, timeout=PROBE_TIMEOUT_S)
        data = resp.json() if resp.status_code == 200 else None
        usage = (data or {}).get("usage") or {}
        if resp.status_code != 200:
            why = f"HTTP {resp.status_code}: {resp.text[:200]}"
        elif not usage.get("completion_tokens"):  # no ids in the text: the same failure reads the same
            choice = ((data or {}).get("choices") or [{}])[0]
            why = f"no tokens came back (finish_reason {choice.get('finish_reason')!r})"
    except httpx.TimeoutException:
        why = f"no answer within {PROBE_TIMEOUT_S:.0f} s"
    except (httpx.HTTPError, ValueError, AttributeError) as e:
        why = f"{type(e).__name__}: {e}"
    took = round(time.monotonic() - t0, 3)
    sup.probe = {"ok": why is None, "seconds": took, "requests": 1,
                 "prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens")}
    if why is None:
        return True
    sup.failure = {"kind": "not_generating", "message": f"READY but not generating: a {PROBE_TOKENS}-token "
                   f"completion failed after {took:.1f} s: {why}",
                   "fix": NOT_GENERATING_FIX, "context": list(sup._tail)}
    return False


async def fetch_models(sup: Supervisor, client: httpx.AsyncClient) -> None:
    try:
        data = (await client.get("/v1/models", timeout=1.0)).json()
        sup.served_models = [m.get("id") for m in data.get("data", [])]
    except (httpx.HTTPError, ValueError, AttributeError):
        sup.served_models = []
