"""End to end at tensor parallel 2 on vLLM's CPU build (issue 25): two real worker processes.

One server (`--demo --profile tp2`, the binding set by qwen-tui from the usable cores) is shared by
the steps, in order: READY with both workers in `status --json` (ranks, per-rank KV lines, the
readiness probe left out of the figures) and on the console's 80x24 screen -> kill -9 of Worker_TP1:
the whole group reaped, backoff, READY again -> stop leaves nothing. A start costs ~70-150 s on two
cores, so that is two starts; then a bad binding forced through [server.env] fails once (~20 s).
"""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest

from tests.helpers.e2e import START_TIMEOUT, cli, kill_left_vllm, pilot_waiter, qwen_home, status, wait_for, wait_state

pytestmark = pytest.mark.e2e
TP2 = ("--demo", "--profile", "tp2")


def _gone(pids: list[int]) -> bool:
    return all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in pids)


@pytest.fixture(scope="module")
def server(tmp_path_factory, vllm_lock):
    from backend.server import procs

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("TP=2 on the CPU build needs two usable cores")
    with qwen_home(tmp_path_factory.mktemp("e2e-tp2-home")):
        assert not procs.find_vllm_processes(), "vLLM processes are already running on this machine"
        try:
            r = cli(*TP2, "serve", "--detach", "--wait", str(START_TIMEOUT), timeout=START_TIMEOUT + 60)
            assert r.returncode == 0, r.stdout + r.stderr
            yield status()
        finally:
            cli("stop", timeout=120)
            kill_left_vllm()


def test_ready_with_two_workers_by_rank_and_both_ranks_figures(server):
    st = status()
    assert st["state"] == "ready"
    ws = st["workers"]
    assert [(w["rank"], w["title"]) for w in ws] == [(0, "VLLM::Worker_TP0"), (1, "VLLM::Worker_TP1")], ws
    assert all(psutil.Process(w["pid"]).is_running() for w in ws)
    # both ranks' "Auto set (a/b) GiB for KV cache ... requested ... non-kv" lines
    per_rank = st["per_rank"]
    assert set(per_rank["kv_cache_gib"]) == {"0", "1"} and set(per_rank["non_kv_gib"]) == {"0", "1"}
    assert st["kv_cache_gib"] == min(per_rank["kv_cache_gib"].values())  # the rank that binds
    # usable means it generates: the probe's tokens came back, and are not in what the user is shown
    assert st["probe"]["ok"] and st["probe"]["completion_tokens"] == 2
    assert st["metrics"]["generation_tokens"] == 0 and st["metrics"]["requests_finished"] == 0, st["metrics"]
    r = cli(*TP2, "status")
    assert f"rank 0 pid {ws[0]['pid']}" in r.stdout and f"rank 1 pid {ws[1]['pid']}" in r.stdout, r.stdout


async def test_the_console_shows_both_workers_at_80x24(server):
    from backend.server.client import ServerClient
    from backend.settings import load
    from backend.spawn import Origin
    from tui.app import make_app
    from tui.widgets.figure_strip import FigureStrip

    ws = status()["workers"]
    want = f"TP0 {ws[0]['pid']} · TP1 {ws[1]['pid']}"
    app = make_app(load(demo=True, profile="tp2"), ServerClient(Origin(demo=True, profile="tp2")))
    async with app.run_test(size=(80, 24)) as pilot:
        until = pilot_waiter(pilot, 15)
        strip = app.screen.query_one(FigureStrip)
        assert await until(lambda: want in strip.last_text), strip.last_text
        line = app.screen._compositor.render_strips()[strip.region.y].text
        assert want in line, line
        app.exit()


def test_kill_9_of_one_worker_reaps_the_group_and_comes_back_ready(server):
    before = status()
    pgid = os.getpgid(before["pid"])
    group = [before["pid"], *(c.pid for c in psutil.Process(before["pid"]).children(recursive=True))]
    victim = before["workers"][1]["pid"]
    t0 = time.time()
    os.kill(victim, signal.SIGKILL)
    wait_state({"failed", "backoff", "starting"}, 30)
    wait_for(lambda: _gone(group), 60, what="the whole old group (API, engine, both workers) to be reaped")
    from backend.server import procs

    assert procs.group_members(pgid) == []
    st = wait_state({"ready"}, START_TIMEOUT)
    assert st["restarts"] == 1 and st["pid"] != before["pid"], st
    assert [w["rank"] for w in st["workers"]] == [0, 1] and victim not in [w["pid"] for w in st["workers"]]
    last = st["last_failure"]
    assert last["kind"] == "engine_dead" and last["was_ready"], last
    assert last["message"].startswith("Worker proc VllmWorker-1 died unexpectedly"), last  # the root cause
    assert time.time() - t0 < START_TIMEOUT


def test_stop_leaves_nothing_and_claims_no_survivor(server):
    st = status()
    pgid = os.getpgid(st["pid"])
    workers = [w["pid"] for w in st["workers"]]
    r = cli("stop", "--json", timeout=120)
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["ok"], r.stdout + r.stderr
    assert "stopped in" in out["summary"] and "surviv" not in out["summary"], out
    from backend.server import procs

    assert procs.group_members(pgid) == [] and _gone(workers)
    assert procs.find_vllm_processes() == []


def test_a_bad_binding_fails_once_with_the_root_cause(tmp_path, vllm_lock):
    """[server.env] wins over qwen-tui's binding: vLLM's "auto" on a one-node box is the NUMA failure."""
    from backend.server import procs

    with qwen_home(tmp_path / "home"):
        r = cli(*TP2, "--set", "server.env.VLLM_CPU_OMP_THREADS_BIND=auto", "serve", "--detach",
                "--wait", "300", "--json", timeout=360)
        assert r.returncode == 1, r.stdout + r.stderr
        out = json.loads(r.stdout)
        st = wait_for(lambda: (s := status())["supervisor_pid"] is None and s, 60, what="the supervisor to end")
        f = st["failure"] or st["last_failure"]
        assert f["kind"] == "cpu_binding", (out, st)
        assert f["message"].startswith("AssertionError: Not enough allowed NUMA nodes"), f
        assert "VLLM_CPU_OMP_THREADS_BIND" in f["fix"]
        assert st["state"] == "failed" and st["restarts"] == 0 and len(st["attempts"]) == 1
        assert procs.find_vllm_processes() == []
