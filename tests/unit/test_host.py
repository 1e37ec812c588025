"""backend.host: the host's RAM, swap and the server tree's RSS, and the level-1 sleep fit warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from backend import host
from backend.cli import main
from backend.server.sleep import sleep_fit, weights_bytes

GIB = 1 << 30


def test_a_sample_has_the_supervisor_and_each_process_of_the_server_tree():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        first = host.sample(os.getpid(), child.pid)
        s = host.sample(os.getpid(), child.pid)
        deadline = time.monotonic() + 10
        while s.cpu_percent is None and time.monotonic() < deadline:  # until the kernel's CPU clock ticks
            s = host.sample(os.getpid(), child.pid)
    finally:
        child.stdin.close()
        child.wait(10)
    assert first.ram_total_bytes > 0 and 0 < s.ram_available_bytes <= s.ram_total_bytes
    assert s.ram_used_bytes == s.ram_total_bytes - s.ram_available_bytes
    assert s.cpu_percent is not None  # the second sample of a poller has one
    assert [(p.pid, p.role) for p in s.procs] == [(os.getpid(), "supervisor"), (child.pid, "other")]
    assert all(p.rss_bytes and p.rss_bytes > 1 << 20 for p in s.procs)
    assert s.server_rss_bytes == s.procs[1].rss_bytes  # the supervisor is not the server
    assert host.sample(None, None).procs == []


def test_a_sample_with_no_cpu_tick_since_the_last_keeps_the_mark(monkeypatch):
    # back-to-back samples inside one clock tick: no figure, and the next window starts at the old mark
    ticks = iter([(10.0, 100.0), (10.0, 100.0), (15.0, 110.0)])
    monkeypatch.setattr(host, "_cpu_seconds", lambda: next(ticks))
    monkeypatch.setattr(host, "_last_cpu", None)
    assert host.sample().cpu_percent is None  # the first: nothing to compare with
    assert host.sample().cpu_percent is None  # no time passed
    assert host.sample().cpu_percent == 50.0  # (15-10)/(110-100), over the whole window


def test_the_process_list_is_bounded(monkeypatch):
    monkeypatch.setattr(host, "PROCS_MOST", 1)
    monkeypatch.setattr(host, "server_pids", lambda pid: [pid, os.getppid()])
    s = host.sample(None, os.getpid())
    assert len(s.procs) == 1 and s.procs_left_out == 1


def test_sleep_fit_warns_only_when_the_weights_do_not_fit():
    assert sleep_fit(28 * GIB, 64 * GIB) is None
    w = sleep_fit(28 * GIB, 20 * GIB)
    assert w and "29.4 GiB" in w and "20.0 GiB" in w and "level 2" in w
    assert sleep_fit(None, 1) is None  # unknown weights: no claim
    assert sleep_fit(28 * GIB, 1, asleep_level=1) is None  # already in RAM


def test_weights_come_from_the_log_per_rank_times_tp_else_the_plan():
    assert weights_bytes({"weights_gib": 14.0}, {"weights_bytes": 1}, tp=2) == 28 * GIB
    assert weights_bytes({}, {"weights_bytes": 5 * GIB}) == 5 * GIB
    assert weights_bytes(None, None) is None


def test_host_json(capsys, qhome):
    assert main(["host", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ram_total_bytes"] > 0 and out["procs"] == [] and out["sleep_fit_warning"] is None
    assert out["server_state"] is None and 0 < out["ram_used_fraction"] < 1


def test_cpu_busy_is_measured_between_samples_whatever_thread_takes_them():
    """psutil.cpu_percent(None) keeps one reading per thread: from a pool of threads it said 0 % each time."""
    import threading

    host._last_cpu = None
    got = []

    def burn_then_sample():
        t = host.time.perf_counter()
        while host.time.perf_counter() - t < 0.3:  # this thread keeps one core busy meanwhile
            pass
        got.append(host.sample().cpu_percent)

    assert host.sample().cpu_percent is None  # nothing to measure over yet
    for _ in range(2):
        th = threading.Thread(target=burn_then_sample)
        th.start()
        th.join()
    assert all(c is not None and c >= 100 / os.cpu_count() / 2 for c in got), got
    assert host._busy_percent((10.0, 100.0), (15.0, 110.0)) == 50.0
