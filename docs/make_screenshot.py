"""docs/console.svg: the real console at 120×40, as `qwen-tui --demo` shows a READY demo server.

    PYTHONPATH=$PWD .venv/bin/python docs/make_screenshot.py [OUT.svg]

Nothing is started: the supervisor's side is a recorded feed. The log is the demo server's own start
on vLLM's CPU build (tests/fixtures/vllm-logs/v0.32.0-cpu-tiny-qwen2-ready.log), parsed by the real
LogParser; /metrics is a loopback HTTP server answering with a recording of the same server after a
load test (tests/fixtures/metrics/vllm-0.32-cpu-after.txt); no NVML (the demo machine has no GPU); the
ledger plans for the recording machine's memory node (9.59 GiB, from its log), so the plan-vs-log panel
compares like with like whatever machine draws the picture.
The app, its screens and widgets are the real ones (tui.app.make_app with load(demo=True)).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LOG = ROOT / "tests" / "fixtures" / "vllm-logs" / "v0.32.0-cpu-tiny-qwen2-ready.log"
METRICS = ROOT / "tests" / "fixtures" / "metrics" / "vllm-0.32-cpu-after.txt"
SIZE = (120, 40)


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = METRICS.read_bytes() if self.path.startswith("/metrics") else b"{}"
        self.send_response(200 if self.path.startswith(("/metrics", "/health")) else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class RecordedFeed:
    """The console's supervisor client, replaying one READY poll of the demo server's recorded start."""

    def __init__(self, base_url: str, port: int) -> None:
        from backend.logparse import LogParser

        lines = [ln for ln in LOG.read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]
        parser = LogParser(year=2026)
        for line in lines:
            parser.feed(line)
        self.lines, self.parsed, self.timeline = lines, parser.snapshot(), parser.phase_durations()
        self.state = {"state": "ready", "pid": 4242, "port": port, "base_url": base_url, "uptime_s": 312.0,
                      "restarts": 0, "served_model_name": "qwen-tui-demo", "served_models": ["qwen-tui-demo"],
                      "vllm_version": self.parsed.get("vllm_version"),
                      "kv_cache_tokens": self.parsed.get("kv_cache_tokens"),
                      "max_concurrency": self.parsed.get("max_concurrency")}
        self.sent = False

    def poll(self):
        from backend.server.client import Poll

        first, self.sent = not self.sent, True
        return Poll(state=self.state, lines=self.lines if first else [], new_log=first, parsed=self.parsed,
                    timeline=self.timeline)

    def close(self) -> None:
        pass


class NoGpu:
    reason = "libnvidia-ml.so.1 not found: no NVIDIA driver on this machine (the demo runs on the CPU)"

    def available(self) -> bool:
        return False

    def shutdown(self) -> None:
        pass


# The recording machine's memory node, as its log says ("Auto set (1.25/9.59) GiB for KV cache on node 0"):
# the ledger plans for the machine the log came from, not for the one that draws the picture.
RECORDED_NODE_TOTAL = int(9.59 * 2**30)


def _plan_for_the_recorded_machine() -> None:
    from backend.ledger import overheads

    if hasattr(overheads, "cpu_total_memory"):
        overheads.cpu_total_memory = lambda *_a, **_k: (RECORDED_NODE_TOTAL, RECORDED_NODE_TOTAL)


async def shoot(out: Path, port: int = 8011) -> None:
    """port: the fake /metrics server's; the demo's by default, so that the picture says what a user sees
    (tests pass 0: any free one, never the port a real demo server may be starting on)."""
    from backend.settings import load
    from tui.app import make_app

    _plan_for_the_recorded_machine()
    from tui.widgets.metrics_panel import MetricsPanel
    from tui.widgets.status_bar import StatusBar

    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), _Metrics)
    except OSError:  # taken (a demo server runs): any free one
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        settings = load(demo=True, overrides=[f"server.port={port}", "console.on_exit=keep"])
        app = make_app(settings, RecordedFeed(f"http://127.0.0.1:{port}", port), NoGpu())
        async with app.run_test(size=SIZE) as pilot:
            bar = app.screen.query_one(StatusBar)
            metrics = app.screen.query_one(MetricsPanel)
            for _ in range(200):  # the first /metrics read, and the plan, then one more frame
                if "READY" in bar.last_text and app.screen.plan is not None and metrics.last_rows:
                    break
                await pilot.pause(0.05)
            else:
                raise SystemExit("the console did not show READY with its metrics and plan in 10 s")
            await pilot.pause(0.3)
            out.parent.mkdir(parents=True, exist_ok=True)
            app.save_screenshot(filename=out.name, path=str(out.parent))
    finally:
        server.shutdown()


def main(argv: list[str]) -> int:
    os.environ["QWEN_TUI_HOME"] = tempfile.mkdtemp(prefix="qwen-tui-shot-")  # no state of the user's
    out = Path(argv[0]) if argv else ROOT / "docs" / "console.svg"
    asyncio.run(shoot(out))
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
