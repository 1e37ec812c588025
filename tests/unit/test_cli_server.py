"""`qwen-tui logs` and `qwen-tui systemd-unit` from the command line (no server needed)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from backend.server import statefile
from tests.helpers import ROOT


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=os.environ.copy(), **kw)


def _log(tmp_path, name: str, n: int):
    path = statefile.logs_dir() / name  # `logs` reads only logs under the state dir
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"line {i}\n" for i in range(n)))
    return path


def test_logs_prints_the_last_n_lines_of_the_current_log(qhome, tmp_path):
    assert _cli("logs").returncode == 1  # no server has run: said, not a traceback
    statefile.write({"state": "stopped", "log_path": str(_log(tmp_path, "a.log", 100))})
    r = _cli("logs", "-n", "3")
    assert r.returncode == 0 and r.stdout == "line 97\nline 98\nline 99\n"
    assert _cli("logs").stdout.count("\n") == 50  # the default


def test_logs_follow_prints_new_lines_and_follows_a_restart_to_its_new_log(qhome, tmp_path, fake_supervisor):
    first = _log(tmp_path, "a.log", 2)
    fake_supervisor(log_path=str(first))
    proc = subprocess.Popen([sys.executable, "-m", "backend.cli", "logs", "-f", "-n", "1"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    guard = threading.Timer(20, proc.kill)  # a follow that stops following fails, never hangs
    guard.start()
    try:
        assert proc.stdout.readline() == "line 1\n"
        with open(first, "a") as f:
            f.write("appended\n")
        assert proc.stdout.readline() == "appended\n"
        second = statefile.logs_dir() / "b.log"
        second.write_text("after the restart\n")
        fake_supervisor(state="starting", log_path=str(second))
        t0 = time.time()
        assert proc.stdout.readline() == "after the restart\n" and time.time() - t0 < 10
    finally:
        guard.cancel()
        proc.kill()
        proc.wait()


def test_systemd_unit_runs_the_supervisor_with_the_same_options(qhome):
    r = _cli("--demo", "--set", "server.port=8123", "systemd-unit")
    assert r.returncode == 0
    unit = r.stdout
    assert "Restart=always" in unit and "KillSignal=SIGTERM" in unit
    exec_line = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    assert "-m backend.cli --demo --set server.port=8123 serve --quiet --restart never" in exec_line
    assert exec_line.split("=", 1)[1].startswith(sys.executable)
