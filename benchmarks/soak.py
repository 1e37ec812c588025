"""Soak: N cycles on the real demo server of start -> READY -> one fault or action -> verify.

    .venv/bin/python benchmarks/soak.py [--cycles N] [--json OUT]     (1-3 minutes a cycle here)

Actions, in turn: stop, restart, kill -9 of the API server, kill -9 of the supervisor, kill -9 of
the console. After each cycle everything must be gone: no vLLM process and no supervisor left from
this run's scratch QWEN_TUI_HOME (found by the environment the processes inherited), and nothing the
orphan scan would list. Prints per cycle the time to READY, to stopped, and the leftovers; exit 1 when
any cycle left something. Holds /tmp/qwen-tui-vllm.lock (as the end-to-end tests do). Not part of
the test suite (minutes per cycle); the README has the last figures.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ACTIONS = ("stop", "restart", "kill-api", "kill-supervisor", "kill-console")
CONSOLE = r"""
import asyncio
from backend.server import client as supervisor_client
from backend.spawn import Origin
from backend.settings import load
from tui.app import QwenApp

async def main():
    settings = load(demo=True)
    settings.console["on_exit"] = "keep"
    app = QwenApp(settings, supervisor_client.ServerClient(Origin(demo=True)), None)
    async with app.run_test(size=(120, 36)) as pilot:
        while True:  # press s (and f in any dialog before a start) until the server is starting
            await pilot.pause(2.0)
            if supervisor_client.status()["state"] in ("stopped", "failed"):
                await pilot.press("s" if type(app.screen).__name__ == "MainScreen" else "f")

asyncio.run(main())
"""


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend.cli", "--demo", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


def status() -> dict:
    return json.loads(cli("status", "--json", timeout=60).stdout)


def wait(pred, timeout: float, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(every)
    return None


def ours(home: str) -> list[str]:
    """Processes still alive that inherited this soak's QWEN_TUI_HOME (supervisors, vLLM, consoles)."""
    left = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        if p.pid == os.getpid() or p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if p.environ().get("QWEN_TUI_HOME") == home:
                left.append(f"{p.pid} {' '.join(p.info['cmdline'] or [])[:60]}")
        except (psutil.Error, OSError):
            continue
    return left


def ready(timeout: float) -> float | None:
    t0 = time.monotonic()
    st = wait(lambda: (lambda s: s if s["state"] in ("ready", "failed") else None)(status()), timeout, 0.5)
    return time.monotonic() - t0 if st and st["state"] == "ready" else None


def cycle(action: str, home: str, timeout: float) -> dict:
    out: dict = {"action": action, "ready_s": None, "recovered_s": None, "stopped_s": None, "error": None}
    console = None
    t0 = time.monotonic()
    if action == "kill-console":
        console = subprocess.Popen([sys.executable, "-c", CONSOLE], cwd=ROOT, env=os.environ.copy(),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait(lambda: status()["state"] in ("starting", "ready"), 90, 0.5)
    else:
        r = cli("serve", "--detach")
        if r.returncode != 0:
            out["error"] = f"serve: {r.stderr.strip()[-300:]}"
            return out
    got = ready(timeout)
    out["ready_s"] = None if got is None else round(time.monotonic() - t0, 1)
    if got is None:
        out["error"] = f"not READY: {status().get('failure') or status().get('detail')}"
    st = status()
    t1 = time.monotonic()
    if action == "restart" and out["ready_s"]:
        cli("stop")
        cli("serve", "--detach")
        got = ready(timeout)
        out["recovered_s"] = None if got is None else round(time.monotonic() - t1, 1)
    elif action == "kill-api" and st.get("pid"):
        os.kill(st["pid"], signal.SIGKILL)
        # failed, backoff 5 s, then a new launch: READY again with another pid
        again = wait(lambda: (lambda s: s if s["state"] == "ready" and s.get("pid") != st["pid"] else None)(
            status()), timeout + 60, 0.5)
        out["recovered_s"] = None if again is None else round(time.monotonic() - t1, 1)
        if again is None:
            out["error"] = f"not READY again after kill -9 of the API server: {status().get('detail')}"
    elif action == "kill-supervisor" and st.get("supervisor_pid"):
        os.kill(st["supervisor_pid"], signal.SIGKILL)
        time.sleep(0.5)
        died = status()
        kind = (died.get("failure") or {}).get("kind")
        out["status_after"] = f"{died['state']}: {kind}, left {len(died.get('left') or [])}"
    elif action == "kill-console" and console is not None:
        console.send_signal(signal.SIGKILL)
        console.wait()
        time.sleep(1.0)
        out["status_after"] = status()["state"]  # the server outlives its console
    t2 = time.monotonic()
    if action == "kill-supervisor":
        r = cli("stop", "--orphans")
    else:
        r = cli("stop")
    left = wait(lambda: not ours(home), 30, 0.5)
    out["stopped_s"] = round(time.monotonic() - t2, 1)
    out["stop_summary"] = (r.stdout.strip() or r.stderr.strip()).splitlines()[-1:] if (r.stdout or r.stderr) else []
    out["leftovers"] = [] if left else ours(home)
    orphans = cli("stop", "--orphans", "--list", "--json")
    try:
        # what no live supervisor owns (another user's or another supervisor's server is not ours)
        out["orphans"] = [p["pid"] for p in json.loads(orphans.stdout)["orphans"]["processes"]
                          if not p.get("refusal")]
    except (ValueError, KeyError):
        out["orphans"] = ["?"]
    if out["leftovers"]:  # clean up so the next cycle starts from nothing
        for line in out["leftovers"]:
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=420, help="seconds to wait for READY")
    ap.add_argument("--json", metavar="OUT", help="also write the per-cycle records here")
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="qwen-tui-soak-")
    os.environ["QWEN_TUI_HOME"] = home
    records = []
    with open("/tmp/qwen-tui-vllm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for i in range(args.cycles):
            rec = cycle(ACTIONS[i % len(ACTIONS)], home, args.timeout)
            records.append(rec)
            print(f"cycle {i + 1:>2} {rec['action']:<15} READY {rec['ready_s']} s"
                  + (f", again {rec['recovered_s']} s" if rec["recovered_s"] is not None else "")
                  + (f", after: {rec['status_after']}" if rec.get("status_after") else "")
                  + f", stopped {rec['stopped_s']} s, leftovers {len(rec['leftovers'])}, "
                  f"orphans {len(rec['orphans'])}" + (f", ERROR {rec['error']}" if rec["error"] else ""),
                  flush=True)
    bad = [r for r in records if r["leftovers"] or r["orphans"] or r["error"]]
    readies = sorted(r["ready_s"] for r in records if r["ready_s"] is not None)
    if readies:
        print(f"{len(records)} cycles: READY median {readies[len(readies) // 2]} s, worst {readies[-1]} s; "
              f"{sum(len(r['leftovers']) for r in records)} leftover processes, "
              f"{sum(len(r['orphans']) for r in records)} orphans, {len(bad)} bad cycle(s)")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
