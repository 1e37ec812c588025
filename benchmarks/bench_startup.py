"""Time to the console's first frame: `qwen-tui` started in a pseudo-terminal (120x40), until the
terminal has received the status bar's state word. Target ≤ 0.5 s.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_startup.py [--runs 5] [--json]

The runs share one fresh state dir (QWEN_TUI_HOME; a first run, not counted, makes the demo model
there and lets Python write its bytecode caches, as any second start finds them: the child runs
without PYTHONDONTWRITEBYTECODE) and use the demo settings on a port nothing uses, so no server is
found: what is timed is Python's start, the imports, the settings, and Textual's first paint. Also
prints the import time of the console's modules in a fresh interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = b"STOPPED"


def first_frame(home: str, timeout: float = 20.0) -> float:
    import fcntl
    import struct
    import termios

    if True:
        env = dict(_env(), QWEN_TUI_HOME=home, TERM="xterm-256color")
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "tui.entry", "--demo", "--set", "server.port=8097"],
                                stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env, start_new_session=True)
        os.close(slave)
        seen, took = b"", None
        try:
            while time.perf_counter() - t0 < timeout:
                r, _, _ = select.select([master], [], [], 0.05)
                if r:
                    try:
                        seen = (seen + os.read(master, 65536))[-200000:]
                    except OSError:
                        break
                    if MARK in seen:
                        took = time.perf_counter() - t0
                        break
        finally:
            proc.kill()  # only the first frame is measured
            proc.wait(10)
            os.close(master)
        if took is None:
            raise SystemExit(f"no first frame within {timeout:.0f} s")
        return took


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's second start has its .pyc files
    return env


def import_s() -> float:
    code = "import time; t = time.perf_counter(); import tui.app, tui.entry; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_env())
    return float(out.stdout.strip())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as home:
        first_frame(home)  # not counted: makes the demo model (once per state dir)
        frames = [first_frame(home) for _ in range(a.runs)]
    imports = [import_s() for _ in range(a.runs)]
    r = {"first_frame_s_median": round(statistics.median(frames), 3), "first_frame_s_max": round(max(frames), 3),
         "import_s_median": round(statistics.median(imports), 3), "runs": a.runs}
    if a.json:
        print(json.dumps(r))
    else:
        print(f"first frame: median {r['first_frame_s_median']} s, worst {r['first_frame_s_max']} s over "
              f"{a.runs} runs (import of the console: median {r['import_s_median']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
