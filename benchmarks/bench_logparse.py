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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=200_000, help="at least this many lines (default 200,000)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"feeding >= {args.lines:,} lines from {FIXTURES.relative_to(ROOT)} ...")
    best = bench(args.lines, args.repeat)
    verdict = "OK" if best >= TARGET else "BELOW TARGET"
    print(f"best: {best:,.0f} lines/s (target {TARGET:,}) {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
