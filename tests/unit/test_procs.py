"""backend.server.procs with real processes: small python trees that title themselves like vLLM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from backend.server import procs
from backend.server.procs import StopReport
from tests.helpers import ROOT
from tests.helpers.procs import VLLM_LIKE, alive


def test_find_vllm_processes_by_title_and_cmdline(spawn) -> None:
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    p = tree.pids
    found = {i.pid: i for i in procs.find_vllm_processes() if i.pid in p.values()}
    assert set(found) == {p["api"], p["engine"], p["tp0"], p["tp1"]}  # not the helper
    engine = found[p["engine"]]
    assert engine.name == "VLLM::EngineCor"  # the kernel keeps 15 characters
    assert engine.role == "engine_core"
    assert found[p["tp0"]].role == "worker"
    assert found[p["tp1"]].cmdline.startswith("VLLM::Worker_TP1")
    assert found[p["tp1"]].role == "worker"
    api = found[p["api"]]
    assert api.role == "api_server"
    assert len(api.cmdline) == procs.CMDLINE_MAX and api.cmdline.endswith("…")
    for info in found.values():
        assert info.pgid == tree.pgid
        assert info.rss_bytes and info.rss_bytes > 1_000_000
        assert info.create_time == psutil.Process(info.pid).create_time()
        assert info.gpu_bytes is None
    assert found[p["engine"]].ppid == p["api"]
    assert set(procs.descendants(p["api"])) == set(p.values()) - {p["api"]}
    assert set(procs.group_members(tree.pgid)) == set(p.values())
    excluded = {i.pid for i in procs.find_vllm_processes(exclude_pids={p["api"]})}
    assert p["api"] not in excluded and p["engine"] in excluded


def test_never_matches_itself_or_its_ancestors() -> None:
    # A parent whose command line says "vllm serve" runs a child titled VLLM::EngineCore that
    # looks for vLLM processes: neither may find itself nor its parent.
    check = (
        "import json, os; open('/proc/self/comm','w').write('VLLM::EngineCore');"
        "from backend.server.procs import find_vllm_processes;"
        "print(json.dumps([os.getpid(), os.getppid(), [i.pid for i in find_vllm_processes()]]))"
    )
    parent = f"import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', {check!r}]).returncode)"
    out = subprocess.run(
        [sys.executable, "-c", parent, "vllm", "serve", "x"], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    me, parent_pid, found = json.loads(out.stdout)
    assert me not in found and parent_pid not in found


def test_terminate_graceful(spawn) -> None:
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    report = procs.terminate(tree.pgid, [tree.popen.pid], timeout=5, popen=tree.popen)
    assert report.survivors == [] and report.killed == [] and report.ok
    assert report.terminated == sorted(tree.pids.values())
    assert report.seconds < 3
    assert report.summary() == f"stopped in {report.seconds:.1f} s"
    assert tree.popen.returncode == -signal.SIGTERM  # polled through the Popen: return code kept
    assert not any(alive(pid) for pid in tree.pids.values())


def test_terminate_escalates_to_sigkill(spawn) -> None:
    spec = {"role": "api", "children": [{"role": "stubborn", "title": "VLLM::EngineCore", "ignore_term": True},
                                        {"role": "tp0", "title": "VLLM::Worker_TP0"}]}
    tree = spawn(spec)
    stubborn = tree.pids["stubborn"]
    report = procs.terminate(tree.pgid, [tree.popen.pid], timeout=1.0, popen=tree.popen)
    assert report.killed == [stubborn]
    assert report.survivors == []
    assert sorted(report.terminated) == sorted([tree.pids["api"], tree.pids["tp0"]])
    assert 1.0 <= report.seconds < 4
    assert report.summary() == f"stopped in {report.seconds:.1f} s; 1 process needed SIGKILL"
    assert not alive(stubborn)


def test_reparented_orphan_is_stopped_through_the_group(spawn) -> None:
    # api -> launcher (exits at once) -> orphan engine: re-parented, still in api's process group.
    spec = {"role": "api", "children": [
        {"role": "launcher", "exit": True, "children": [{"role": "orphan", "title": "VLLM::EngineCore"}]},
    ]}
    tree = spawn(spec)
    orphan, launcher = tree.pids["orphan"], tree.pids["launcher"]
    deadline = time.monotonic() + 5
    while alive(launcher) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(launcher)
    assert psutil.Process(orphan).ppid() != launcher
    assert orphan not in procs.descendants(tree.popen.pid)
    assert os.getpgid(orphan) == tree.pgid
    assert orphan in procs.group_members(tree.pgid)
    report = procs.terminate(tree.pgid, [tree.popen.pid], timeout=5, popen=tree.popen)
    assert report.ok and report.killed == []
    assert orphan in report.terminated
    assert not alive(orphan)
    assert procs.group_members(tree.pgid) == []


def test_terminate_without_a_group_targets_only_the_chosen_orphan(spawn) -> None:
    # A stubborn orphan engine in its own session with one worker; a bystander in the same tree.
    spec = {"role": "api", "children": [
        {"role": "launcher", "exit": True, "children": [
            {"role": "engine", "title": "VLLM::EngineCore", "ignore_term": True, "new_session": True,
             "children": [{"role": "tp0", "title": "VLLM::Worker_TP0", "ignore_term": True}]},
        ]},
        {"role": "bystander", "title": "VLLM::Worker_TP1"},
    ]}
    tree = spawn(spec)
    engine, tp0 = tree.pids["engine"], tree.pids["tp0"]
    report = procs.terminate(None, [engine], timeout=1.0)
    assert report.killed == sorted([engine, tp0])  # its descendant too, both ignored SIGTERM
    assert report.survivors == []
    assert report.summary().endswith("2 processes needed SIGKILL")
    assert alive(tree.pids["bystander"]) and alive(tree.pids["api"])  # nothing else was touched


def test_zombie_child_counts_as_gone_and_is_not_reaped_behind_popen(spawn) -> None:
    tree = spawn({"role": "solo"})
    start = time.monotonic()
    report = procs.terminate(None, [tree.popen.pid], timeout=5)  # no popen: it stays a zombie
    assert time.monotonic() - start < 2
    assert report.terminated == [tree.popen.pid] and report.ok
    assert psutil.Process(tree.popen.pid).status() == psutil.STATUS_ZOMBIE
    assert tree.popen.wait(timeout=5) == -signal.SIGTERM  # the owner still gets the real code


def test_nothing_running(spawn) -> None:
    tree = spawn({"role": "solo"})
    tree.popen.kill()
    tree.popen.wait()
    report = procs.terminate(None, [tree.popen.pid], timeout=1)
    assert report == StopReport(report.seconds, [], [], [], [])
    assert report.summary() == "nothing was running"


def test_is_same_process(spawn) -> None:
    tree = spawn({"role": "solo", "args": ["vllm", "serve", "m"]})
    pid = tree.popen.pid
    ctime = psutil.Process(pid).create_time()
    assert procs.is_same_process(pid, ctime)
    assert procs.is_same_process(pid, ctime + 0.005)
    assert procs.is_same_process(pid, ctime, "vllm serve")
    assert not procs.is_same_process(pid, ctime, "something else")
    assert not procs.is_same_process(pid, ctime - 1.0)  # a reused pid: another start time
    assert not procs.is_same_process(pid, ctime + 0.05)
    tree.popen.kill()
    tree.popen.wait()
    assert not procs.is_same_process(pid, ctime)


def test_refuses_dangerous_targets() -> None:
    with pytest.raises(ValueError):
        procs.terminate(os.getpgrp(), [], timeout=1)
    for pgid in (0, 1, -1):
        with pytest.raises(ValueError):
            procs.terminate(pgid, [], timeout=1)
    for pid in (0, 1, -1, os.getpid(), os.getppid()):
        with pytest.raises(ValueError):
            procs.terminate(None, [pid], 5.0)


def test_with_gpu_memory(spawn) -> None:
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    p = tree.pids
    found = [i for i in procs.find_vllm_processes() if i.pid in p.values()]
    unused = next(pid for pid in range(4_000_000, 4_100_000) if not psutil.pid_exists(pid))
    gib = 1 << 30
    nvml = {p["tp0"]: 21 * gib, p["tp1"]: None, os.getpid(): 512 * 1024**2, unused: gib}
    merged = {i.pid: i for i in procs.with_gpu_memory(found, nvml)}
    assert merged[p["tp0"]].gpu_bytes == 21 * gib
    assert merged[p["tp1"]].gpu_bytes is None
    assert merged[p["engine"]].gpu_bytes is None
    assert merged[os.getpid()].gpu_bytes == 512 * 1024**2  # an NVML pid not in the list: added
    assert merged[os.getpid()].name == psutil.Process().name()
    assert merged[unused].name == "?" and merged[unused].gpu_bytes == gib
    assert list(merged)[: len(found)] == [i.pid for i in found]


def test_summary_wording() -> None:
    assert StopReport(1.43, [1, 2], [], []).summary() == "stopped in 1.4 s"
    assert StopReport(31.2, [1], [2, 3, 4], []).summary() == "stopped in 31.2 s; 3 processes needed SIGKILL"
    assert StopReport(36.0, [], [], [1234, 1235]).summary() == "2 processes survive SIGKILL: 1234, 1235"
    assert StopReport(36.0, [], [], [1234]).summary() == "1 process survives SIGKILL: 1234"


TP2 = {"role": "api", "args": ["vllm", "serve", "m"], "children": [
    {"role": "engine", "title": "VLLM::EngineCore", "children": [
        {"role": "tp1", "argv0": "VLLM::Worker_TP1"}, {"role": "tp0", "argv0": "VLLM::Worker_TP0"}]}]}


def test_workers_of_a_tp2_group_come_by_rank(spawn):
    tree = spawn(TP2, args=TP2["args"])
    ws = procs.workers(tree.pgid)
    assert [(w["rank"], w["pid"], w["title"]) for w in ws] == [
        (0, tree.pids["tp0"], "VLLM::Worker_TP0"), (1, tree.pids["tp1"], "VLLM::Worker_TP1")]
    assert all(w["rss_bytes"] for w in ws)


def test_worker_rank_reads_the_title():
    assert procs.worker_rank("VLLM::Worker_TP1") == 1
    assert procs.worker_rank("VLLM::Worker_PP1_TP0", tp_size=2) == 2
    assert procs.worker_rank("VLLM::Worker_PP1_TP0") is None  # no TP size: not guessed
    assert procs.worker_rank("VLLM::Worker") is None
