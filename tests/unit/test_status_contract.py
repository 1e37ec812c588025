"""`qwen-tui status --json` is a contract: every key, its order and every value stay as they were.

Each case writes a state file as the supervisor would (or none), freezes the clock, and compares
`status()` printed as `status --json` prints it with tests/fixtures/status/CASE.json, recorded from
the code before backend/server/status.py existed. Pids and paths that differ per run are replaced by
placeholders before comparing. QWEN_TUI_RECORD_STATUS=1 writes the files anew (only on purpose)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from backend.server import client as supervisor_client
from backend.server import statefile
from backend.server.status import SUPERVISED
from tests.helpers import FIXTURES
from tests.helpers.fake_supervisor import start_fake_supervisor

NOW = 1764572500.0
GOLDEN = FIXTURES / "status"
FAILURE = {"kind": "kv_cache_too_small", "message": "max seq len 32768 > KV cache 12784 tokens",
           "fix": "set server.max_model_len = 12784"}
ATTEMPT = {"attempt": 1, "kind": "no_cache_memory", "message": "No available memory for the cache blocks",
           "fix": "raise server.gpu_memory_utilization", "log_path": "/logs/vllm-1.log", "at": NOW - 30}
LIVE = {"pid": 4242, "pid_create_time": 1.0, "port": 8011, "base_url": "http://127.0.0.1:8011",
        "served_model_name": "qwen2.5-14b", "served_models": ["qwen2.5-14b"], "started_at": NOW - 75.25,
        "restarts": 1, "log_path": "/logs/vllm-2.log", "detail": "pid 4242",
        "figures": {"vllm_version": "0.32.0", "kv_cache_tokens": 1309184, "max_concurrency": 639.25,
                    "weights_seconds": 0.02},
        "settings": {"console": {"stop_timeout": 30}}, "argv_hash": "abc"}
SLEEP = {"sleep_enabled": True, "sleep_level": 1, "slept_at": NOW - 5, "gpu_memory_freed_bytes": 123 << 30,
         "wake_seconds": None, "sleep_op": {"id": "a1", "action": "sleep", "ok": True}}

CASES = {
    "none": None,
    "stopped": {"state": "stopped", "port": 8011, "base_url": "http://127.0.0.1:8011", "restarts": 2,
                "log_path": "/logs/vllm-2.log", "detail": "stopped in 1.2 s", "stop_report": "stopped in 1.2 s"},
    "failed": {"state": "failed", "port": 8011, "base_url": "http://127.0.0.1:8011", "restarts": 0,
               "log_path": "/logs/vllm-1.log", "detail": "failed", "failure": FAILURE,
               "last_failure": ATTEMPT, "attempts": [ATTEMPT]},
    "died": "died",
    "starting": {"state": "starting", **LIVE, "figures": {"vllm_version": "0.32.0"}, "attempt": 2,
                 "last_failure": ATTEMPT, "attempts": [ATTEMPT]},
    "ready": {"state": "ready", **LIVE, "ready_at": NOW - 10},
    "backoff": {"state": "backoff", **LIVE, "failure": FAILURE, "detail": "restart in 5 s (failure 1)",
                "attempts": [ATTEMPT], "last_failure": ATTEMPT},
    "stopping": {"state": "stopping", **LIVE, "stopping_at": NOW - 4, "reaping_pids": [4243]},
    "sleeping": {"state": "sleeping", **LIVE, **SLEEP},
}


def _dump(st: dict) -> str:
    return json.dumps(st, indent=2, default=str) + "\n"  # what `status --json` prints (_print_json)


@pytest.fixture
def frozen(monkeypatch):
    monkeypatch.setattr(supervisor_client.time, "time", lambda: NOW)


@pytest.mark.parametrize("case", sorted(CASES))
def test_status_json_keys_and_values_are_unchanged(case, qhome, tmp_path, frozen):
    data, subs = CASES[case], {}
    proc = None
    try:
        if data == "died":  # a supervisor killed while ready: its pid is gone, the file says ready
            gone = subprocess.Popen([sys.executable, "-c", "pass"])
            gone.wait()
            statefile.write({"state": "ready", "supervisor_pid": gone.pid, "supervisor_create_time": 1.0,
                             "supervisor_cmdline": "x", **LIVE, "pid": None})
            subs[str(gone.pid)] = "<SUPERVISOR_PID>"
        elif isinstance(data, dict) and data["state"] in SUPERVISED:
            proc, write = start_fake_supervisor(tmp_path)
            write(**data)
            subs[str(proc.pid)] = "<SUPERVISOR_PID>"
        elif data is not None:
            statefile.write(data)
        text = _dump(supervisor_client.status().to_dict())
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    for real, placeholder in subs.items():
        text = re.sub(rf"\b{real}\b", placeholder, text)
    text = text.replace(str(statefile.state_path().parent), "<STATE_DIR>")
    path = GOLDEN / f"{case}.json"
    if os.environ.get("QWEN_TUI_RECORD_STATUS"):
        path.write_text(text)
    assert text == path.read_text()
