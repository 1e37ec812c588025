"""Time to the console's first frame: `qwen-tui` started in a pseudo-terminal (120x40), until the
terminal has received the status bar's state word. Target ≤ 0.5 s.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_startup.py [--runs 5] [--json] [--baseline DIR] [--bare]

--baseline DIR: another checkout (e.g. `git worktree add --detach /tmp/base main`) timed the same way,
alternating run for run with this one, each with its own state dir: medians of both and their ratio
from one run, as the shared machine's load moves under both alike. --bare: a bare Textual app (one
Static) timed in the same turns: the floor that Textual's import and first paint set on this machine.
The CPU figure (the child's, until it is killed at its first frame) varies less than the wall clock.
A child that prints a traceback stops the benchmark (the source lines it shows can hold the mark).

The runs share one fresh state dir (QWEN_TUI_HOME; a first run, not counted, makes the demo model
there, lets Python write its bytecode caches and the console keep its parsed stylesheet, as any
second start finds them: the child runs without PYTHONDONTWRITEBYTECODE) and use the demo settings
on a port nothing uses, so no server is found: what is timed is Python's start, the imports, the
settings, and Textual's first paint. Also prints the import time of the console's modules in a
fresh interpreter.
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
CSS_KEPT = "tcss.pickle"  # tui/app.py


CONSOLE = ["-m", "tui.entry", "--demo", "--set", "server.port=8097"]
# the floor Textual alone sets: its import, one screen with one Static, the first paint
BARE = ["-c", "from textual.app import App\nfrom textual.widgets import Static\n"
        "class Bare(App):\n    def compose(self):\n        yield Static('STOPPED')\nBare().run()"]


def first_frame(home: str, timeout: float = 20.0, root: Path = ROOT, argv: list[str] = CONSOLE,
                until: Path | None = None) -> tuple[float, float]:
    """Seconds from the start to the first frame, and the CPU seconds the console used until then.
    `until`: a file the child writes after its first frame, waited for before it is killed."""
    import fcntl
    import struct
    import termios

    if True:
        env = dict(_env(root), QWEN_TUI_HOME=home, TERM="xterm-256color")
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *argv],
                                stdin=slave, stdout=slave, stderr=slave, cwd=root, env=env, start_new_session=True)
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
                    if b"Traceback" in seen:  # a crash's traceback can show source with the mark in it
                        raise SystemExit(f"the child crashed: {seen[-2000:].decode(errors='replace')}")
                    if MARK in seen:
                        took = time.perf_counter() - t0
                        break
            while until is not None and not until.exists() and time.perf_counter() - t0 < timeout:
                time.sleep(0.05)  # a condition, not a time: the child writes it once its first frame is out
        finally:
            proc.kill()  # only the first frame is measured
            _, status, usage = os.wait4(proc.pid, 0)  # its CPU time: steadier than the wall clock on a busy machine
            proc.returncode = os.waitstatus_to_exitcode(status)
            os.close(master)
        if took is None:
            raise SystemExit(f"no first frame within {timeout:.0f} s")
        return took, usage.ru_utime + usage.ru_stime


def _keeps_css(root: Path) -> bool:
    """Whether that checkout's console keeps its parsed stylesheet (a baseline from before may not)."""
    return CSS_KEPT in (root / "tui" / "app.py").read_text(encoding="utf-8")


def _env(root: Path = ROOT) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's second start has its .pyc files
    return env


def import_s(root: Path = ROOT) -> float:
    code = "import time; t = time.perf_counter(); import tui.app, tui.entry; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, env=_env(root))
    return float(out.stdout.strip())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--json", action="store_true")
    p.add_argument("--baseline", type=Path, metavar="DIR", help="another checkout, timed alternating with this one")
    p.add_argument("--bare", action="store_true", help="also a bare Textual app (one Static): Textual's own floor")
    a = p.parse_args()
    # key -> (checkout, argv); timed in turn, run for run, so the machine's load moves under all alike
    targets = {"": (ROOT, CONSOLE)}
    if a.baseline is not None:
        targets["baseline_"] = (a.baseline.resolve(), CONSOLE)
    if a.bare:
        targets["bare_textual_"] = (ROOT, BARE)
    frames: dict[str, list[float]] = {k: [] for k in targets}
    cpus: dict[str, list[float]] = {k: [] for k in targets}
    with tempfile.TemporaryDirectory() as tmp:
        homes = {k: tempfile.mkdtemp(dir=tmp) for k in targets}
        for k, (root, argv) in targets.items():
            # not counted: makes the demo model (once per state dir) and, once its first frame is out,
            # the console keeps its parsed stylesheet (tui/themes.py), as any second start finds them
            kept = Path(homes[k]) / "cache" / CSS_KEPT if argv is CONSOLE and _keeps_css(root) else None
            first_frame(homes[k], root=root, argv=argv, until=kept)
        for _ in range(a.runs):
            for k, (root, argv) in targets.items():
                took, cpu = first_frame(homes[k], root=root, argv=argv)
                frames[k].append(took)
                cpus[k].append(cpu)
    imports: dict[str, list[float]] = {k: [] for k in targets if targets[k][1] is CONSOLE}
    for _ in range(a.runs):
        for k in imports:
            imports[k].append(import_s(targets[k][0]))
    r: dict = {"runs": a.runs}
    for k in targets:
        r.update({f"{k}first_frame_s_median": round(statistics.median(frames[k]), 3),
                  f"{k}first_frame_s_max": round(max(frames[k]), 3),
                  f"{k}cpu_s_median": round(statistics.median(cpus[k]), 3)})
        if k in imports:
            r[f"{k}import_s_median"] = round(statistics.median(imports[k]), 3)
    if a.baseline is not None:
        r["baseline"] = str(a.baseline)
        r["first_frame_ratio"] = round(r["first_frame_s_median"] / r["baseline_first_frame_s_median"], 3)
        pairs = zip(frames[""], frames["baseline_"], strict=True)
        r["first_frame_ratio_per_pair"] = [round(x / y, 3) for x, y in pairs]
        r["cpu_ratio"] = round(r["cpu_s_median"] / r["baseline_cpu_s_median"], 3)
    if a.json:
        print(json.dumps(r))
        return 0
    names = {"": "first frame", "baseline_": "baseline first frame", "bare_textual_": "bare Textual first frame"}
    for k in targets:
        line = (f"{names[k]}: median {r[k + 'first_frame_s_median']} s, worst {r[k + 'first_frame_s_max']} s over "
                f"{a.runs} runs; CPU until then: median {r[k + 'cpu_s_median']} s")
        print(line + (f" (import of the console: median {r[k + 'import_s_median']} s)" if k in imports else ""))
    if a.baseline is not None:
        print(f"ratio (this / baseline): first frame {r['first_frame_ratio']} (per pair "
              f"{r['first_frame_ratio_per_pair']}), CPU {r['cpu_ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
