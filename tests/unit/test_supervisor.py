"""Supervisor stop paths in seconds, not minutes: the launched program is a stand-in process tree
(an "API server" that prints vLLM log lines and starts a child titled ``VLLM::EngineCore`` in its
group), not vLLM and not an HTTP server; NVML is a double that lists the tree's live pids as GPU
holders. The same paths run against real vLLM in test_e2e.py."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import psutil

from backend.server import procs
from backend.server.launch import Launch, VllmInstall
from backend.server.supervisor import Supervisor
from backend.settings import load
from tests.helpers.supervisor import STAND_IN, GroupOnGpu, engine_pids, until

GIB = 2**30

def _supervisor(qhome, restart="never", *args: str) -> Supervisor:
    settings = load(None, demo=False, overrides=["console.stop_timeout=5", "server.port=1"])
    launch = Launch([sys.executable, "-c", STAND_IN, *args], {}, VllmInstall(None, None, sys.executable), [])
    sup = Supervisor(settings, launch, restart=restart)
    sup.gpus = GroupOnGpu(sup)
    return sup


async def test_stop_reports_time_and_released_gpu_memory(qhome) -> None:
    sup = _supervisor(qhome)
    run = asyncio.create_task(sup.run())
    await until(lambda: sup.state == "starting" and len(engine_pids(sup)) == 1)
    pgid = sup._pgid
    sup.request_stop()
    assert await asyncio.wait_for(run, 30) == 0
    assert sup.state == "stopped"
    assert procs.group_members(pgid) == []
    assert sup.stop_report.startswith("stopped in")
    assert "GPU memory released: 8.0 GiB of 2 processes" in sup.stop_report
    rel = sup.gpu_release
    assert rel["checked"] and rel["ok"] and len(rel["held_before"]) == 2
    assert rel["used_before"] == 9 * GIB and rel["used_after"] == GIB
    assert sup.gpus.shut  # closed with the supervisor


async def test_killed_api_process_leaves_an_orphan_that_is_cleaned_and_its_memory_checked(qhome) -> None:
    sup = _supervisor(qhome)
    run = asyncio.create_task(sup.run())
    await until(lambda: sup.state == "starting" and len(engine_pids(sup)) == 1)
    engine = engine_pids(sup)[0]
    os.kill(sup.proc.pid, signal.SIGKILL)
    assert await asyncio.wait_for(run, 30) == 1  # restart="never": failed for good
    assert sup.state == "failed"
    assert not psutil.pid_exists(engine) or psutil.Process(engine).status() == psutil.STATUS_ZOMBIE
    assert "leftovers: stopped in" in sup.stop_report and "GPU memory released: 4.0 GiB" in sup.stop_report
    assert sup.status()["gpu_release"]["held_before"] == {str(engine): 4 * GIB}


async def test_an_engine_death_line_ends_a_lingering_launch_as_failed(qhome) -> None:
    """The API process keeps running after its engine died (it would answer 500/503): the line
    alone is enough to fail the launch, stop what is left and apply the restart policy."""
    sup = _supervisor(qhome, "never", "--die")
    states: list[str] = []
    sup.on_state = lambda t: states.append(t.state)
    run = asyncio.create_task(sup.run())
    assert await asyncio.wait_for(run, 30) == 1
    assert sup.state == "failed" and states[:2] == ["starting", "failed"]
    assert sup.status()["failure"]["kind"] == "engine_dead"
    assert "stopped in" in sup.stop_report  # it was alive: the supervisor stopped it
    assert sup.restarts == 0


# A named fake, for a fault real vLLM cannot be made to produce on demand: /health that turns to 500
# on a server that is still running. The stand-in answers 200 to its first two probes, then 500.
FAKE_HEALTH_500 = r"""
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    n = 0
    def do_GET(self):
        H.n += 1
        code = 200 if self.path != "/health" or H.n <= 2 else 500
        body = json.dumps({"data": [{"id": sys.argv[2]}]}).encode() if self.path == "/v1/models" else b"{}"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):  # the readiness probe's 2-token completion
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"usage": {"prompt_tokens": 1, "completion_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
print("INFO 11-29 10:00:00 [api_server.py:1] vLLM API server version 0.11.0", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


async def test_health_failing_past_the_grace_period_fails_a_ready_server(qhome) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    settings = load(None, overrides=["console.stop_timeout=5", f"server.port={port}",
                                     "console.health_interval_s=0.1", "console.health_grace_s=0.5"])
    launch = Launch([sys.executable, "-c", FAKE_HEALTH_500, str(port), settings.served_name], {},
                    VllmInstall(None, None, sys.executable), [])
    sup = Supervisor(settings, launch, restart="never")
    sup.gpus = GroupOnGpu(sup)
    states: list[str] = []
    sup.on_state = lambda t: states.append(t.state)
    t0 = time.monotonic()
    assert await asyncio.wait_for(sup.run(), 30) == 1
    assert states[:2] == ["starting", "ready"] and sup.state == "failed"
    assert sup.status()["failure"]["kind"] == "engine_dead"
    assert "/health failing" in sup.status()["failure"]["message"]
    assert "hung or stopped" in sup.status()["failure"]["fix"]
    assert time.monotonic() - t0 < 10  # 0.5 s grace, not a hang
    assert "stopped in" in sup.stop_report  # the still-running process was stopped


async def test_gives_up_after_n_failures_within_the_window(qhome, monkeypatch) -> None:
    import backend.server.supervisor as sv

    monkeypatch.setattr(sv, "BACKOFF_START_S", 0.05)  # 0.05 s, 0.1 s ... instead of 5 s, 10 s
    settings = load(None, overrides=["console.stop_timeout=5", "server.port=1",
                                     "console.restart_max_failures=3", "console.restart_window_s=600"])
    # a different root cause each time: the same one twice before READY would stop the loop at once
    crash = ("import uuid; print('INFO 11-29 10:00:00 [api_server.py:1] vLLM API server version 0.11.0'); "
             "print('RuntimeError: crash ' + uuid.uuid4().hex.translate(str.maketrans('0123456789', 'ghijklmnop')));"
             " raise SystemExit(3)")
    launch = Launch([sys.executable, "-c", crash], {}, VllmInstall(None, None, sys.executable), [])
    sup = Supervisor(settings, launch, restart="on-failure")
    sup.gpus = GroupOnGpu(sup)
    details: list[tuple[str, str]] = []
    sup.on_state = lambda t: details.append((t.state, t.detail))
    assert await asyncio.wait_for(sup.run(), 30) == 1
    assert sup.restarts == 2  # three launches, three failures
    assert [d for s, d in details if s == "backoff"] == ["restart in 0 s (failure 1)", "restart in 0 s (failure 2)"]
    assert details[-1] == ("failed", "gave up after 3 failures in 600 s")
