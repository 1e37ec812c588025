"""What the console says while things take time: a start's phase, elapsed and expected total (from
the previous start of the same settings), a stop's countdown to SIGKILL, and "stopped" (not the
old log's "failed", nor the parser's initial "starting") after a clean stop."""

from __future__ import annotations

import asyncio
import socket
import sys
import time

from backend.server import startup_history, statefile
from backend.server.client import ServerClient, _sigkill_in
from backend.server.launch import Launch, VllmInstall
from backend.server.statefile import argv_hash
from backend.server.supervisor import Supervisor
from backend.settings import load
from tui.widgets.status_bar import progress_text

HEALTHY = r"""
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # /health 200; /v1/models serves the configured name (READY asks for it)
        body = json.dumps({"data": [{"id": "qwen2.5-14b"}]} if self.path == "/v1/models" else {}).encode()
        self.send_response(200)
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


def test_history_round_trip_and_a_broken_file(tmp_path):
    path = tmp_path / "startups.json"
    assert startup_history.expected("abc", path) is None
    startup_history.record("abc", 112.34, path)
    assert startup_history.expected("abc", path) == 112.3
    assert startup_history.expected(None, path) is None
    path.write_text("{not json")
    assert startup_history.expected("abc", path) is None
    startup_history.record("abc", 5, path)  # a broken file is replaced, never raised about
    assert startup_history.expected("abc", path) == 5.0


async def test_a_ready_launch_records_how_long_it_took(qhome):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    settings = load(None, overrides=["console.stop_timeout=5", f"server.port={port}",
                                     "server.served_model_name=qwen2.5-14b"])
    launch = Launch([sys.executable, "-c", HEALTHY, str(port)], {}, VllmInstall(None, None, sys.executable), [])
    sup = Supervisor(settings, launch, restart="never")
    sup.gpus = type("NoGpu", (), {"available": lambda self: False, "shutdown": lambda self: None,
                                  "reason": "test"})()
    run = asyncio.create_task(sup.run())
    deadline = time.monotonic() + 20
    key = argv_hash(launch.argv)
    while time.monotonic() < deadline and startup_history.expected(key) is None:
        await asyncio.sleep(0.05)
    sup.request_stop()
    assert await asyncio.wait_for(run, 30) == 0
    took = startup_history.expected(key)
    assert took is not None and 0 <= took < 20


def test_sigkill_countdown_while_stopping():
    now = time.time()
    data = {"state": "stopping", "stopping_at": now - 4, "settings": {"console": {"stop_timeout": 30}}}
    assert 25 <= _sigkill_in(data) <= 26
    assert _sigkill_in(dict(data, state="ready")) is None
    assert _sigkill_in(dict(data, stopping_at=now - 100)) == 0.0


def test_status_line_progress():
    starting = {"state": "starting", "uptime_s": 42, "expected_ready_s": 112}
    assert progress_text(starting, {"phase": "profiling"}) == "phase profiling · 0m42s of ~1m52s (last start)"
    assert "first start of these settings" in progress_text(dict(starting, expected_ready_s=None), {})
    assert progress_text({"state": "stopping", "sigkill_in_s": 27.2}, {}) == "SIGTERM sent · SIGKILL in 27 s"
    assert progress_text({"state": "ready"}, {}) == ""


def test_phase_after_a_clean_stop_is_stopped(qhome):
    """The last log ends in shutdown noise that reads like a failure; the supervisor said stopped."""
    log = statefile.logs_dir() / "vllm-old.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("(APIServer pid=1) INFO 11-29 08:33:18 [api_utils.py:347]   version 0.32.0\n"
                   "(EngineCore pid=2) ERROR 11-29 08:34:00 [core.py:1] EngineCore failed to start.\n"
                   "RuntimeError: Engine core initialization failed.\n")
    statefile.write({"state": "stopped", "supervisor_pid": 999999, "supervisor_create_time": 1.0,
                     "log_path": str(log), "detail": "stopped in 0.6 s"})
    poll = ServerClient().poll()
    assert poll.state["state"] == "stopped"
    assert poll.parsed["phase"] == "stopped" and poll.parsed.get("failure") is None
    assert all(seconds is not None and phase != "failed" for phase, _, seconds in poll.timeline), poll.timeline


def test_phase_with_no_server_yet_is_stopped_not_starting(qhome):
    poll = ServerClient().poll()
    assert poll.state["state"] == "stopped" and poll.parsed["phase"] == "stopped"
