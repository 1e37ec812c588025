"""A fake vLLM /metrics server (loopback, a thread): the recorded CPU-build texts, with the gauges and
counters a test sets. For the recorder, the idle timer and the recorder's CPU benchmark."""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "vllm-0.32-cpu-after.txt"


class FakeMetrics:
    def __init__(self) -> None:
        self.text = FIXTURE.read_text()
        self.values: dict[str, float] = {}  # sample name (no labels) -> value, replacing the fixture's
        self.reads = 0
        self.delay_s = 0.0
        self.load: int | None = None  # GET /load's server_load (vLLM's --enable-server-load-tracking); None: 404
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.reads += 1
                if outer.delay_s:
                    threading.Event().wait(outer.delay_s)  # a hung server, for the never-blocks test
                if self.path == "/load" and outer.load is not None:
                    body = b'{"server_load": %d}' % outer.load
                else:
                    body = outer.render().encode()
                ok = self.path == "/metrics" or (self.path == "/load" and outer.load is not None)
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def render(self) -> str:
        text = self.text
        for name, value in self.values.items():
            text = re.sub(rf"^({re.escape(name)}(?:{{[^}}]*}})?) \S+$", rf"\g<1> {value}", text, flags=re.M)
        return text

    def __enter__(self) -> FakeMetrics:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
