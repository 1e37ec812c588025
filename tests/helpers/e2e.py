"""Helpers for the end-to-end tests: run the real CLI in a subprocess, wait for states."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env or os.environ.copy())


def status() -> dict:
    r = cli("status", "--json", timeout=30)
    return json.loads(r.stdout)


def wait_for(pred, timeout: float, every: float = 0.2, what: str = "condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")


def wait_state(states: set[str], timeout: float) -> dict:
    def check():
        st = status()
        return st if st["state"] in states else None

    return wait_for(check, timeout, every=0.5, what=f"state in {states}")


def pilot_waiter(pilot, default_timeout: float):
    """`await until(pred)` inside a Pilot session: True once pred() holds, False after the timeout."""

    async def until(pred, timeout: float = default_timeout) -> bool:
        t = time.time()
        while time.time() - t < timeout:
            if pred():
                return True
            await pilot.pause(0.1)
        return False

    return until
