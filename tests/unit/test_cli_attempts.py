"""`serve --wait` never misses a failed attempt between two restarts, and `logs --attempt N` /
`parse-log --attempt N` reach an earlier attempt's log (issue 9). The supervisor's state is written
by hand here; the supervisor that writes it is tested in test_supervisor_attempts.py."""

from __future__ import annotations

import os
import subprocess
import sys

from backend.cli import commands
from backend.server import client as supervisor_client
from backend.server import statefile
from backend.server.status import ServerStatus
from tests.helpers import ROOT

FAIL = {"attempt": 1, "kind": "no_cache_memory", "message": "ValueError: No available memory for the cache blocks.",
        "fix": "raise server.gpu_memory_utilization", "log_path": "/x/vllm-1.log", "exit_code": 1,
        "was_ready": False}


def _statuses(monkeypatch, seq: list[dict]) -> None:
    it = iter(seq)
    last = {}

    def status():
        nonlocal last
        last = next(it, last)
        return ServerStatus.from_dict(last)

    monkeypatch.setattr(supervisor_client, "status", status)
    monkeypatch.setattr(commands.time, "sleep", lambda s: None)


def test_wait_reports_a_failed_attempt_it_never_saw_as_failed(monkeypatch, capsys):
    live = {"supervisor_pid": 42, "attempts": []}
    _statuses(monkeypatch, [
        {**live, "state": "starting"},  # what --wait saw first
        {**live, "state": "starting"},
        # attempt 1 failed and attempt 2 started between two polls: only the history tells
        {**live, "state": "starting", "attempts": [FAIL], "last_failure": FAIL},
        {**live, "state": "ready", "attempts": [FAIL], "last_failure": FAIL},
    ])
    assert commands._wait_ready(60, quiet=True) == 0
    err = capsys.readouterr().err
    assert "attempt 1 failed: no_cache_memory" in err and "restarting" in err and "/x/vllm-1.log" in err


def test_wait_stops_at_a_failure_the_supervisor_will_not_restart(monkeypatch, capsys):
    live = {"supervisor_pid": 42}
    _statuses(monkeypatch, [
        {**live, "state": "starting", "attempts": []},
        {**live, "state": "failed", "attempts": [FAIL], "last_failure": FAIL, "failure": FAIL,
         "detail": "exit code 1: no_cache_memory (not restarted: it would fail the same way)"},
    ])
    assert commands._wait_ready(60, quiet=True) == 1
    err = capsys.readouterr().err
    assert "not restarted" in err and "fix: raise server.gpu_memory_utilization" in err


def test_wait_time_out_names_the_last_failure(monkeypatch, capsys):
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr(commands.time, "time", lambda: next(clock))
    _statuses(monkeypatch, [{"supervisor_pid": 42, "state": "backoff", "attempts": [FAIL], "last_failure": FAIL}])
    assert commands._wait_ready(30, quiet=True) == 1
    err = capsys.readouterr().err
    assert "not ready after 30 s; last failure: no_cache_memory" in err


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=os.environ.copy())


def test_logs_and_parse_log_of_an_earlier_attempt(qhome):
    logs = statefile.logs_dir()
    logs.mkdir(parents=True)
    first = logs / "vllm-20261201-070038-77-0.log"
    first.write_text("(EngineCore pid=2340) INFO 12-01 07:01:22 [gpu_worker.py:440] "
                     "Available KV cache memory: -5.03 GiB\n"
                     "(EngineCore pid=2340) ERROR 12-01 07:01:22 [core.py:1136] ValueError: No available memory "
                     "for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n")
    second = logs / "vllm-20261201-070200-77-1.log"
    second.write_text("INFO 12-01 07:02:00 [api_server.py:1] starting again\n")
    statefile.write({"state": "failed", "supervisor_pid": 77, "attempt": 2, "log_path": str(second),
                     "attempts": [{**FAIL, "log_path": str(first)}]})
    r = _cli("logs", "--attempt", "1")
    assert r.returncode == 0 and "No available memory" in r.stdout and "starting again" not in r.stdout
    assert "starting again" in _cli("logs", "--attempt", "2").stdout
    r = _cli("logs", "--attempt", "5")
    assert r.returncode == 1 and "no log for attempt 5 (attempts: 1, 2)" in r.stderr
    r = _cli("parse-log", "--attempt", "1", "--json")
    assert r.returncode == 0 and '"no_cache_memory"' in r.stdout
    r = _cli("parse-log")
    assert r.returncode == 2 and "--attempt N" in r.stderr
