"""The failure message is the root cause (issue 25): the first exception of the process that failed
first, the wrapper lines after it kept as context; a failure before READY whose root cause repeats is
not restarted, whatever its kind; a stop's "survives SIGKILL" is checked again before it is said."""

from __future__ import annotations

import subprocess
import sys
import time

from backend.logparse import diagnose, parse_lines
from backend.server import client as supervisor_client
from backend.server import statefile
from backend.server.launch import Launch, VllmInstall
from backend.server.supervisor import Supervisor, same_cause
from backend.settings import load
from tests.helpers import FIXTURES

LOGS = FIXTURES / "vllm-logs"
NUMA = "v0.32.0-cpu-tp2-numa-autobind-fail.log"
KILLED = "v0.32.0-cpu-tp2-ready-then-worker-killed.log"


def _parse(name: str, rc: int | None = 1):
    lines = [ln for ln in (LOGS / name).read_text(encoding="utf-8").splitlines() if not ln.startswith("# ")]
    p = parse_lines(lines)
    if rc is not None:
        p.process_exited(rc)
    return p


def test_numa_binding_failure_is_its_own_kind_with_the_root_cause_and_the_binding_fix():
    f = _parse(NUMA).snapshot()["failure"]
    assert f["kind"] == "cpu_binding"
    assert f["message"].startswith("AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local")
    assert f["context"] == ["RuntimeError: Engine core initialization failed. See root cause above. "
                            "Failed core proc(s): {}"]
    assert 'VLLM_CPU_OMP_THREADS_BIND = "0|1"' in f["fix"] and "[server.env]" in f["fix"]


def test_without_a_signature_the_root_cause_still_beats_the_wrapper(monkeypatch):
    """The pick does not depend on knowing the failure: with the binding signature taken out, the log's
    last exception (the API server's RuntimeError wrapper) is context, the EngineCore's AssertionError
    is the message."""
    monkeypatch.setattr(diagnose, "HARD", tuple(h for h in diagnose.HARD if h[1] is not diagnose._cpu_bind))
    f = _parse(NUMA).snapshot()["failure"]
    assert f["kind"] == "unknown"
    assert f["message"].startswith("AssertionError: Not enough allowed NUMA nodes")
    assert any(c.startswith("RuntimeError: Engine core initialization failed") for c in f["context"])


def test_a_killed_worker_is_the_root_cause_of_the_dead_engine_and_both_ranks_are_kept():
    p = _parse(KILLED, rc=0)
    f = p.snapshot()["failure"]
    assert f["kind"] == "engine_dead"
    assert f["message"] == "Worker proc VllmWorker-1 died unexpectedly (exit code: None), shutting down executor."
    assert f["context"][-1].startswith("vllm.v1.engine.exceptions.EngineDeadError")
    rep = p.report()
    # both ranks' "Auto set (a/b) GiB for KV cache ..., with X GiB requested ... Y GiB ... non-kv" lines
    pr = rep["per_rank"]
    assert (pr["kv_cache_gib"], pr["requested_gib"], pr["non_kv_gib"]) == (
        {"0": 1.03, "1": 1.02}, {"0": 1.72, "1": 1.72}, {"0": 0.68, "1": 0.7})
    assert pr["node_total_gib"] == {"0": 9.09, "1": 9.09}  # equal on both ranks: listed all the same
    assert rep["kv_cache_gib"] == 1.02 and rep["kv_cache_tokens"] == 1068416  # the rank that binds


def test_an_error_before_ready_is_not_the_root_cause_of_a_later_death():
    p = parse_lines([
        "(APIServer pid=1) ERROR 12-02 02:11:00 [x.py:1] ValueError: something it got past",
        "INFO:     Application startup complete.",
        "(EngineCore pid=2) ERROR 12-02 02:12:32 [multiproc_executor.py:315] Worker proc VllmWorker-0 died "
        "unexpectedly (exit code: None), shutting down executor.",
        "(APIServer pid=1) ERROR 12-02 02:12:34 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    ])
    p.process_exited(0)
    assert p.snapshot()["failure"]["message"].startswith("Worker proc VllmWorker-0 died unexpectedly")


def test_same_cause_ignores_numbers_only():
    assert same_cause("port 8011 is answered by pid 4242", "port 8011 is answered by pid 5151")
    assert not same_cause("AssertionError: Not enough allowed NUMA nodes", "ValueError: No available memory")
    assert not same_cause(None, None) and not same_cause("", "")


def _sup(qhome) -> Supervisor:
    launch = Launch([sys.executable, "-c", "pass"], {}, VllmInstall(None, None, sys.executable), [])
    return Supervisor(load(None, overrides=["server.port=1"]), launch)


def _attempt(sup: Supervisor, kind: str, message: str, ready: bool) -> bool:
    sup.failure = {"kind": kind, "message": message, "fix": "x"}
    sup.ready_at = time.time() if ready else None
    repeated = sup._record_attempt(1)
    sup.restarts += 1
    return repeated


def test_the_same_root_cause_twice_before_ready_stops_whatever_the_kind(qhome):
    sup = _sup(qhome)
    cause = "AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers."
    assert not _attempt(sup, "unknown", cause, ready=False)
    assert _attempt(sup, "unknown", cause, ready=False)  # "unknown" no longer loops forever
    sup = _sup(qhome)
    assert not _attempt(sup, "unknown", "RuntimeError: one thing", ready=False)
    assert not _attempt(sup, "unknown", "RuntimeError: another", ready=False)  # not the same way


def test_a_kill_after_ready_keeps_its_restarts(qhome):
    sup = _sup(qhome)
    died = "Worker proc VllmWorker-1 died unexpectedly (exit code: None), shutting down executor."
    assert not _attempt(sup, "engine_dead", died, ready=True)
    assert not _attempt(sup, "engine_dead", died, ready=True)
    assert not _attempt(sup, "engine_dead", died, ready=False)  # the one before it had served


def test_a_survivor_gone_by_the_time_stop_reports_is_not_said_to_survive(qhome):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    ok, text = supervisor_client._stopped({"stop_report": f"stopped in 31.0 s; 1 process survives SIGKILL: {gone.pid}",
                                           "stop_survivors": [{"pid": gone.pid, "create_time": 1.0}]})
    assert ok and "survive" not in text and text.startswith("stopped in 31.0 s")


def test_a_survivor_still_there_makes_the_stop_fail(qhome):
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ctime = statefile.create_time(alive.pid)
        ok, text = supervisor_client._stopped({"stop_report": f"1 process survives SIGKILL: {alive.pid}",
                                               "stop_survivors": [{"pid": alive.pid, "create_time": ctime}]})
        assert not ok and f"still running after SIGKILL: {alive.pid}" in text
    finally:
        alive.kill()
        alive.wait()
