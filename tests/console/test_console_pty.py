"""The real console on a pseudo-terminal, beside a stand-in supervisor (a small process that writes
the state file as the real one does): quitting asks when it should, and the process always ends.

No vLLM here: the stand-in says READY, and on SIGTERM says STOPPING and takes its time to exit,
as a loading vLLM does before its SIGKILL."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import ROOT as ROOT_PATH
from tests.helpers.terminal import console_in_pty

ROOT = str(ROOT_PATH)

FAKE_SUPERVISOR = r"""
import os, signal, sys, time
from backend.server import statefile

me = os.getpid()
base = {"supervisor_pid": me, "supervisor_create_time": statefile.create_time(me),
        "supervisor_cmdline": statefile.cmdline(me), "pid": None, "port": 9, "base_url": "http://127.0.0.1:9",
        "served_model_name": "stand-in", "started_at": time.time(), "log_path": None, "restarts": 0,
        "settings": {"console": {"stop_timeout": 30}}}
statefile.write(dict(base, state="ready", detail="stand-in"))
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(time.time()))
while not stop:
    time.sleep(0.05)
statefile.write(dict(base, state="stopping", stopping_at=stop[0], detail="SIGTERM to the process group"))
time.sleep(float(sys.argv[1]))  # a slow stop
statefile.write(dict(base, state="stopped", detail="stopped in a while"))
"""

ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")


def _text(raw: bytes) -> str:
    return ANSI.sub(b"", bytes(raw)).decode("utf-8", "replace")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("QWEN_TUI_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _env(home) -> dict:
    return dict(os.environ, QWEN_TUI_HOME=str(home), PYTHONPATH=ROOT, TERM="xterm-256color")


@pytest.fixture
def supervisor(home):
    """A stand-in supervisor that says READY; its stop takes 20 s."""
    from backend.server import statefile

    # titled like a supervisor (`-m backend.cli serve` in its argv): the state file names it, and is trusted
    proc = subprocess.Popen([sys.executable, "-c", FAKE_SUPERVISOR, "20", "-m", "backend.cli", "serve"], cwd=ROOT,
                            env=_env(home))
    deadline = time.time() + 20
    while time.time() < deadline and not (statefile.read() or {}).get("state"):
        time.sleep(0.05)
    assert (statefile.read() or {}).get("state") == "ready"
    yield proc
    proc.kill()
    proc.wait()


def _console(home):
    return console_in_pty(["--config", os.path.join(ROOT, "config.toml")], _env(home), (24, 80), controlling=True)


def _wait(pred, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def _press(console, keys: bytes) -> None:
    os.write(console.master, keys)


def _ended_within(console, seconds: float) -> float | None:
    t0 = time.time()
    try:
        console.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None
    return time.time() - t0


@pytest.fixture
def console(home, supervisor):
    proc = _console(home)
    assert _wait(lambda: "READY" in _text(proc.screen) or proc.poll() is not None, 60), _text(proc.screen)[-500:]
    assert proc.poll() is None, _text(proc.screen)[-2000:]
    time.sleep(0.5)  # its keys and signal handlers in place
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    try:
        os.close(proc.master)
    except OSError:
        pass


def test_ctrl_q_with_the_server_running_asks_the_on_exit_question(console, supervisor):
    mark = len(console.screen)
    _press(console, b"\x11")  # ctrl+q
    assert _wait(lambda: "Leave it running" in _text(console.screen[mark:]), 10), _text(console.screen[mark:])
    assert console.poll() is None, "ctrl+q quit at once with the server running"
    _press(console, b"k")  # keep it running
    assert _ended_within(console, 5) is not None
    assert supervisor.poll() is None  # kept


def test_ctrl_c_outside_a_text_field_asks_too(console):
    mark = len(console.screen)
    _press(console, b"\x03")  # ctrl+c
    assert _wait(lambda: "Leave it running" in _text(console.screen[mark:]), 10), _text(console.screen[mark:])
    _press(console, b"\x1b")  # cancel: still running
    time.sleep(1.0)
    assert console.poll() is None


def test_stop_then_quit_ends_the_process_although_the_stop_still_waits(console, supervisor):
    """x (confirmed with y), then q while the supervisor is still stopping: the console's own
    process ends at once. Before, the thread waiting for the stop kept it alive (and SIGTERM
    only reached a handler of a loop that no longer ran)."""
    mark = len(console.screen)
    _press(console, b"x")
    assert _wait(lambda: "Stop the server?" in _text(console.screen[mark:]), 10), _text(console.screen[mark:])
    _press(console, b"y")
    assert _wait(lambda: "STOPPING" in _text(console.screen[mark:]), 10), _text(console.screen[mark:])
    assert "SIGKILL in" in _text(console.screen[mark:]) or _wait(
        lambda: "SIGKILL in" in _text(console.screen[mark:]), 3)
    _press(console, b"q")
    took = _ended_within(console, 3)
    assert took is not None, "the console outlived its quit"
    assert supervisor.poll() is None  # still in its slow stop: not the console's business


@pytest.mark.parametrize("how", ["SIGTERM", "closed terminal"])
def test_sigterm_or_a_closed_terminal_ends_the_console(console, supervisor, how):
    if how == "SIGTERM":
        os.kill(console.pid, signal.SIGTERM)
    else:
        os.close(console.master)
    took = _ended_within(console, 5)
    assert took is not None, f"the console survived {how}"
    assert supervisor.poll() is None  # the server lives in its supervisor, not in the console


def test_sigterm_while_a_stop_still_waits_ends_the_console(console, supervisor):
    mark = len(console.screen)
    _press(console, b"x")
    assert _wait(lambda: "Stop the server?" in _text(console.screen[mark:]), 10)
    _press(console, b"y")
    assert _wait(lambda: "STOPPING" in _text(console.screen[mark:]), 10)
    os.kill(console.pid, signal.SIGTERM)
    assert _ended_within(console, 5) is not None, "SIGTERM did not end a console whose stop still waits"
