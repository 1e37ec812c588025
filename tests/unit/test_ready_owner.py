"""READY only from the process the supervisor started (issue 17, case 2): any HTTP server that
answers /health 200 on the port used to count. Stand-ins: an impostor HTTP server in this test
process, and a launched child that serves /health and /v1/models itself."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from backend.server.launch import Launch, VllmInstall
from backend.server.supervisor import Supervisor
from backend.settings import load
from tests.helpers.supervisor import until

SERVE = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port, name = int(sys.argv[1]), sys.argv[2]
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"" if self.path == "/health" else json.dumps({"data": [{"id": name}]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_POST(self):  # the readiness probe's completion: tokens, or none with --no-tokens
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        n = 0 if "--no-tokens" in sys.argv else 2
        body = json.dumps({"choices": [{"text": "hi" if n else ""}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": n}}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
print("INFO 11-29 10:00:00 [api_server.py:1] vLLM API server version 0.11.0", flush=True)
HTTPServer(("127.0.0.1", port), H).serve_forever()
"""
IDLE = "import time\nprint('INFO loading', flush=True)\nwhile True: time.sleep(1)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Impostor(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"" if self.path == "/health" else json.dumps({"data": [{"id": "someone-else"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def _sup(port: int, *argv: str) -> tuple[Supervisor, list[str]]:
    settings = load(None, overrides=["console.stop_timeout=3", f"server.port={port}",
                                     "server.served_model_name=qwen-tui-demo", "planner.device=cpu"])
    launch = Launch([sys.executable, "-c", *argv], {}, VllmInstall(None, None, sys.executable), [])
    seen: list[str] = []
    sup = Supervisor(settings, launch, restart="never", on_state=lambda t: seen.append(t.state))
    return sup, seen


def test_an_unrelated_server_on_the_port_is_port_in_use_never_ready(qhome):
    port = _free_port()
    httpd = ThreadingHTTPServer(("127.0.0.1", port), Impostor)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        sup, seen = _sup(port, IDLE)

        async def go():
            task = asyncio.create_task(sup.run())
            rc = await asyncio.wait_for(task, 30)
            return rc

        assert asyncio.run(go()) == 1
    finally:
        httpd.shutdown()
    assert "ready" not in seen
    assert sup.failure["kind"] == "port_in_use"
    assert f"pid {os.getpid()}" in sup.failure["message"] and "not by the server" in sup.failure["message"]


def test_the_launched_server_serving_the_configured_name_is_ready(qhome):
    port = _free_port()
    sup, seen = _sup(port, SERVE, str(port), "qwen-tui-demo")

    async def go():
        task = asyncio.create_task(sup.run())
        await until(lambda: sup.state == "ready", timeout=20)
        sup.request_stop()
        return await asyncio.wait_for(task, 20)

    assert asyncio.run(go()) == 0
    assert sup.served_models == ["qwen-tui-demo"]
    # usable means it generates: the 2-token probe went through, and its counts are kept to leave out
    assert sup.probe is not None and sup.probe["ok"] and sup.probe["completion_tokens"] == 2


def test_ready_but_not_generating_is_a_failure_with_the_log_tail(qhome):
    port = _free_port()
    sup, seen = _sup(port, SERVE, str(port), "qwen-tui-demo", "--no-tokens")
    assert asyncio.run(asyncio.wait_for(sup.run(), 30)) == 1
    assert "ready" not in seen
    f = sup.status()["last_failure"]
    assert f["kind"] == "not_generating" and f["message"].startswith("READY but not generating: a 2-token completion")
    assert "no tokens came back" in f["message"] and not f["was_ready"]
    assert any("vLLM API server version" in line for line in sup.failure["context"])  # the log's last lines


def test_the_probe_is_left_out_of_the_figures_shown():
    from backend.metrics import Snapshot, without_probe

    snap = Snapshot(at=1.0, prompt_tokens=11, generation_tokens=7, requests_finished=3)
    probe = {"ok": True, "requests": 1, "prompt_tokens": 1, "completion_tokens": 2}
    out = without_probe(snap, probe)
    assert (out.prompt_tokens, out.generation_tokens, out.requests_finished) == (10, 5, 2)
    assert without_probe(snap, None) is snap and without_probe(snap, dict(probe, ok=False)) is snap


def test_a_launched_server_serving_another_name_is_not_ready(qhome):
    port = _free_port()
    sup, seen = _sup(port, SERVE, str(port), "someone-else")

    async def go():
        task = asyncio.create_task(sup.run())
        await until(lambda: sup.served_models == ["someone-else"], timeout=20)
        await asyncio.sleep(0.5)
        state = sup.state
        sup.request_stop()
        await asyncio.wait_for(task, 20)
        return state

    assert asyncio.run(go()) == "starting" and "ready" not in seen
