"""Throughput of the vLLM log parser: python benchmarks/bench_logparse.py [--lines N]

Builds a realistic stream by repeating the bodies of the fixture logs in tests/fixtures/vllm-logs/
(headers stripped; every repetition starts a fresh parser, as each vLLM launch does) and feeds it
through LogParser.feed one line at a time. Target: >= 100,000 lines/s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.logparse import LogParser  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "vllm-logs"
TARGET = 100_000


def fixture_bodies() -> list[list[str]]:
    bodies = []
    for path in sorted(FIXTURES.glob("*.log")):
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
        i = 0
        while i < len(lines) and lines[i].startswith("#"):
            i += 1
        body = [ln for ln in lines[i:] if not ln.startswith(("# [cut]", "# segments:"))]
        bodies.append(body)
    return bodies


def build_runs(min_lines: int) -> tuple[list[list[str]], int]:
    bodies = fixture_bodies()
    runs, total = [], 0
    while total < min_lines:
        for body in bodies:
            runs.append(body)
            total += len(body)
    return runs, total


def bench(min_lines: int, repeat: int = 3) -> float:
    runs, total = build_runs(min_lines)
    best = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        for body in runs:
            feed = LogParser().feed
            for line in body:
                feed(line)
        dt = time.perf_counter() - t0
        best = max(best, total / dt)
        print(f"  {total:,} lines in {dt:.3f} s = {total / dt:,.0f} lines/s")
    return best


SERVING = [
    'INFO:     127.0.0.1:35340 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "(APIServer pid=17335) INFO 11-29 08:35:05 [loggers.py:259] Engine 000: Avg prompt throughput: 12.3 tokens/s, "
    "Avg generation throughput: 45.6 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.3%, "
    "Prefix cache hit rate: 0.0%",
]


def bench_serving(n: int) -> float:
    """One parser that saw a ready start-up, then n lines of access log + stats (a busy server)."""
    _, body = next((p, b) for p, b in zip(sorted(FIXTURES.glob("*.log")), fixture_bodies(), strict=False)
                   if p.name == "v0.32.0-cpu-tiny-qwen2-ready.log")
    p = LogParser()
    for line in body:
        p.feed(line)
    stream = (SERVING * (n // len(SERVING) + 1))[:n]
    feed = p.feed
    t0 = time.perf_counter()
    for line in stream:
        feed(line)
    dt = time.perf_counter() - t0
    assert p.phase == "ready"
    return n / dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=200_000, help="at least this many lines (default 200,000)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"feeding >= {args.lines:,} lines from {FIXTURES.relative_to(ROOT)} ...")
    best = bench(args.lines, args.repeat)
    verdict = "OK" if best >= TARGET else "BELOW TARGET"
    print(f"best: {best:,.0f} lines/s (target {TARGET:,}) {verdict}")
    serving = bench_serving(args.lines)
    print(f"serving traffic (access log + stats lines, one parser): {serving:,.0f} lines/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
