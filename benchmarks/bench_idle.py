"""CPU of an idle console: the real `qwen-tui` in a pseudo-terminal, the demo server READY, nothing
typed, its CPU time sampled over a window (target ≤ 2 % of one core).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_idle.py [--seconds 60] [--port 8019] [--no-start] [--json]

Without --no-start it starts the demo server on --port (1-2 minutes) and stops it at the end; with
--no-start the server the settings point at must already be running. The console runs at 120x40 on
a pty whose output is read and thrown away; after a 10 s settle it is sampled (psutil user+system
time of the console process, not the server) for --seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
                TERM="xterm-256color", COLUMNS="120", LINES="40")


def console_cpu(argv: list[str], seconds: float, settle: float = 10.0) -> dict:
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "tui.entry", *argv], stdin=slave, stdout=slave, stderr=slave,
                            cwd=ROOT, env=_env(), start_new_session=True)
    os.close(slave)
    stop = threading.Event()
    out = {"bytes": 0}

    def drain() -> None:
        while not stop.is_set():
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    out["bytes"] += len(os.read(master, 65536))
                except OSError:
                    return

    threading.Thread(target=drain, daemon=True).start()
    try:
        p = psutil.Process(proc.pid)
        time.sleep(settle)
        t0, c0, b0 = time.monotonic(), p.cpu_times(), out["bytes"]
        time.sleep(seconds)
        t1, c1, b1 = time.monotonic(), p.cpu_times(), out["bytes"]
        rss = p.memory_info().rss
    finally:
        stop.set()
        proc.terminate()  # SIGTERM: the console exits and leaves the server running
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(3)
        os.close(master)
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    return {"seconds": round(t1 - t0, 1), "cpu_s": round(cpu, 3),
            "cpu_percent_of_core": round(100 * cpu / (t1 - t0), 2),
            "terminal_bytes_per_s": round((b1 - b0) / (t1 - t0), 1), "rss_mb": round(rss / 2**20, 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--port", type=int, default=8019)
    p.add_argument("--no-start", action="store_true", help="the server is already running")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    argv = ["--demo", "--set", f"server.port={a.port}"]
    if not a.no_start:
        print(f"starting the demo server on port {a.port} (1-2 minutes)…", file=sys.stderr)
        if subprocess.run([sys.executable, "-m", "tui.entry", *argv, "serve", "--detach", "--wait", "600"],
                          cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL).returncode != 0:
            print("the demo server did not start: see `qwen-tui logs`", file=sys.stderr)
            return 1
    try:
        r = console_cpu(argv, a.seconds)
    finally:
        if not a.no_start:
            subprocess.run([sys.executable, "-m", "tui.entry", *argv, "stop"], cwd=ROOT, env=_env(),
                           stdout=subprocess.DEVNULL)
    if a.json:
        print(json.dumps(r))
    else:
        print(f"idle console, server READY: {r['cpu_percent_of_core']} % of a core over {r['seconds']} s "
              f"({r['cpu_s']} s CPU), {r['terminal_bytes_per_s']} bytes/s to the terminal, RSS {r['rss_mb']} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
