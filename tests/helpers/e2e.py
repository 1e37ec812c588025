"""Helpers for the end-to-end tests: run the real CLI in a subprocess, wait for states."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 420  # a real vLLM CPU server: ~45 s alone, minutes on a busy machine


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


@contextmanager
def qwen_home(home: Path) -> Iterator[Path]:
    """QWEN_TUI_HOME=home for the CLI subprocesses and the in-process console; the old value (or
    none) is put back on the way out."""
    old = os.environ.get("QWEN_TUI_HOME")
    os.environ["QWEN_TUI_HOME"] = str(home)
    try:
        yield home
    finally:
        if old is None:
            os.environ.pop("QWEN_TUI_HOME", None)
        else:
            os.environ["QWEN_TUI_HOME"] = old


def kill_left_vllm() -> None:
    """SIGKILL every vLLM process still on this machine (a test's cleanup, whatever failed before it)."""
    import signal

    from backend.server import procs

    for p in procs.find_vllm_processes():
        try:
            os.kill(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@contextmanager
def demo_server(home: Path, timeout: float = START_TIMEOUT) -> Iterator[dict]:
    """The real vLLM CPU demo server under `home` (`--demo serve --detach`), READY; yields its
    `status --json`. On the way out: `stop`, then kill any vLLM process left (even when a test
    failed). Hold the `vllm_lock` fixture around it: it refuses to start beside a running vLLM."""
    from backend.server import procs

    with qwen_home(home):
        assert not procs.find_vllm_processes(), "vLLM processes are already running on this machine"
        try:
            r = cli("--demo", "serve", "--detach", timeout=60)
            assert r.returncode == 0, r.stderr
            st = wait_state({"ready", "failed"}, timeout)
            assert st["state"] == "ready", st
            yield st
        finally:
            cli("stop", timeout=120)
            kill_left_vllm()
