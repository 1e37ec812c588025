"""The console reaps the supervisor it started: no zombie, so a stop ends when the supervisor does."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from backend.server import client as supervisor_client
from backend.server import statefile

# a stand-in supervisor: exits on SIGTERM at once
FAKE_SUPERVISOR = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); time.sleep(60)"


def _gone(pid: int) -> bool:
    """Reaped: the pid no longer exists (a zombie still does)."""
    return not psutil.pid_exists(pid)


def test_spawned_child_is_reaped_when_it_exits():
    proc = supervisor_client.spawn_reaped([sys.executable, "-c", "pass"])
    deadline = time.time() + 10
    while time.time() < deadline and not _gone(proc.pid):
        time.sleep(0.05)
    assert _gone(proc.pid), "the exited child stayed a zombie of the console"


def test_stop_of_a_supervisor_this_console_started_returns_when_it_exits(qhome):
    """Before: the exited supervisor stayed a zombie (same pid, same start time), so stop() waited
    for console.stop_timeout + 20 s (~50 s of 'busy' after every stop)."""
    # titled like a supervisor (`... -m backend.cli serve` in its argv), as the state file's trust needs
    proc = supervisor_client.spawn_reaped([sys.executable, "-c", FAKE_SUPERVISOR, "-m", "backend.cli", "serve"])
    time.sleep(0.3)  # its signal handler installed
    statefile.write({"state": "ready", "supervisor_pid": proc.pid,
                     "supervisor_create_time": statefile.create_time(proc.pid),
                     "supervisor_cmdline": statefile.cmdline(proc.pid),
                     "settings": {"console": {"stop_timeout": 30}}})
    t0 = time.time()
    ok, text = supervisor_client.stop(timeout=8)
    assert ok, text
    assert time.time() - t0 < 5
    assert _gone(proc.pid), text  # it was signalled and reaped, not skipped as untrusted


def test_a_plain_popen_child_stays_a_zombie_and_is_not_taken_for_alive():
    """The cause, shown: an unreaped child keeps its pid and start time after it exits; the state
    file's check (statefile.pid_matches) counts such a zombie as gone all the same."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    created = statefile.create_time(proc.pid)
    time.sleep(1.0)
    try:
        assert psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
        assert not statefile.pid_matches(proc.pid, created)
    finally:
        proc.wait()
