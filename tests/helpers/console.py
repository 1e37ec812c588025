"""Pilot helpers: a scripted supervisor client, a machine without NVML, an app built on them."""

from __future__ import annotations

import socket
from contextlib import asynccontextmanager

from backend.server.client import Poll
from backend.settings import load
from tui.app import make_app


class ScriptedClient:
    """Returns scripted polls in order, then repeats the last one; records actions."""

    def __init__(self, polls: list[Poll]) -> None:
        self.polls = list(polls)
        self.actions: list[str] = []

    def poll(self) -> Poll:
        if self.polls:
            self.last = self.polls.pop(0)
            return self.last
        return Poll(state=self.last.state, parsed=self.last.parsed)

    orphan_scan = None  # an OrphanScan to report before a start (None: nothing found)

    def start(self, allow_orphans: bool = False) -> str:
        self.actions.append("start --allow-orphans" if allow_orphans else "start")
        return "started"

    def scan_orphans(self, server_env, gpus=None):
        from backend.server import orphans

        found = self.orphan_scan
        if found is not None:  # what a real scan would now find: the pids still alive
            found = orphans.scan(server_env, monitor=NoNvml())
            listed = {p.pid for p in self.orphan_scan.processes}
            found = orphans.OrphanScan([p for p in found.processes if p.pid in listed], None, "test",
                                       self.orphan_scan.supervisors, self.orphan_scan.servers)
        return found or orphans.OrphanScan([], None, "test")

    def kill_orphans(self, pids, found, gpus=None):
        from backend.server import orphans

        self.actions.append(f"kill {' '.join(map(str, pids))}")
        return orphans.kill(pids, found)  # real: the test's own titled processes

    def stop(self) -> str:
        self.actions.append("stop")
        return "stopped in 1.2 s"

    def restart(self) -> str:
        self.actions.append("restart")
        return "restarted"


class NoNvml:
    """A GpuMonitor on a machine without NVIDIA's driver."""

    reason = "libnvidia-ml.so.1 not found: no NVIDIA driver on this machine"

    def available(self) -> bool:
        return False

    def shutdown(self) -> None:
        pass


READY = {"state": "ready", "uptime_s": 75, "restarts": 0}
PARSED = {"vllm_version": "0.32.0", "phase": "ready", "ready": True, "kv_cache_tokens": 1309184,
          "max_concurrency": 639.25, "max_concurrency_tokens": 2048, "weights_seconds": 0.02}


def app_with(polls, qhome, *overrides):
    settings = load(overrides=["console.on_exit=ask", *overrides])
    client = ScriptedClient(polls)
    return make_app(settings, client), client


async def wait_until(pilot, pred, tries=50):
    for _ in range(tries):
        if pred():
            return True
        await pilot.pause(0.05)
    return False


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@asynccontextmanager
async def bench_dialog_on_a_closed_port(qhome, size=(150, 45)):
    """(app, pilot): a console beside a READY server whose port nothing listens on, its load-test
    dialog (b) open."""
    from tui.screens.bench import BenchScreen

    port = closed_port()
    state = {"state": "ready", "base_url": f"http://127.0.0.1:{port}", "served_model_name": "m"}
    app, _ = app_with([Poll(state=state)], qhome, f"server.port={port}")
    async with app.run_test(size=size) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        await pilot.press("b")
        assert await wait_until(pilot, lambda: isinstance(app.screen, BenchScreen))
        yield app, pilot
