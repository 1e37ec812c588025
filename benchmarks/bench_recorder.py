"""CPU of the flight recorder (backend/recorder.py): its thread alone, sampling /metrics into SQLite.
Target: at most 1 % of one core at the default interval (console.history_interval_s = 5 s).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_recorder.py [--seconds 30] [--url URL] [--json]

Without --url the /metrics it reads is a FAKE server (tests/helpers/fake_metrics.py: vLLM 0.32's
CPU-build text, counters moving each read) in a child process, so its CPU is not counted; with --url
it reads a running server (the demo: http://127.0.0.1:8000). The recorder runs on its thread in this
process; the CPU counted is this process's (time.process_time: the recorder's thread and an idle
main thread waiting). Two runs: at 0.1 s for the cost of one sample, then at the default 5 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend import recorder  # noqa: E402

_FAKE = """
import sys, threading
sys.path.insert(0, sys.argv[1])
from tests.helpers.fake_metrics import FakeMetrics
fake = FakeMetrics()
render = fake.render
n = [0]
def moving():
    n[0] += 1
    fake.values["vllm:generation_tokens_total"] = 100.0 * n[0]
    fake.values["vllm:num_requests_running"] = float(n[0] % 3)
    return render()
fake.render = moving
with fake:
    print(fake.base_url, flush=True)
    sys.stdin.read()
"""


def run(url: str, interval: float, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        rec = recorder.Recorder(Path(d), lambda: ("ready", url), interval_s=interval)
        t0, c0 = time.perf_counter(), time.process_time()
        rec.start()
        time.sleep(seconds)  # the measured window: the recorder works on its own thread meanwhile
        rec.stop()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        size = recorder.db_path(Path(d)).stat().st_size
    return {"interval_s": interval, "seconds": round(wall, 2), "samples": rec.samples, "error": rec.error,
            "cpu_s": round(cpu, 4), "cpu_ms_per_sample": round(cpu / max(1, rec.samples) * 1000, 3),
            "core_percent": round(cpu / wall * 100, 3), "db_bytes": size}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--url", help="a running server's base URL instead of the fake /metrics")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    fake = None
    url = a.url
    if url is None:
        fake = subprocess.Popen([sys.executable, "-c", _FAKE, str(ROOT)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        url = fake.stdout.readline().strip()
    try:
        fast = run(url, 0.1, min(a.seconds, 20.0))
        default = run(url, 5.0, a.seconds)
    finally:
        if fake is not None:
            fake.stdin.close()
            fake.wait(10)
    per_sample_pct = fast["cpu_ms_per_sample"] / 1000 / 5.0 * 100
    out = {"source": "fake /metrics (vLLM 0.32 CPU text)" if a.url is None else a.url, "fast": fast,
           "default": default, "core_percent_at_5s_from_per_sample": round(per_sample_pct, 3),
           "target_core_percent": 1.0}
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['source']}: {fast['cpu_ms_per_sample']} ms of CPU per sample ({fast['samples']} samples at "
              f"0.1 s) -> {per_sample_pct:.3f} % of a core at 5 s; measured at 5 s: {default['core_percent']} % "
              f"({default['samples']} samples in {default['seconds']} s); target <= 1 %")
    return 0 if max(per_sample_pct, default["core_percent"]) <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
