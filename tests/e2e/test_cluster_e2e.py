"""Tier 3 of the cluster (issue 18): two REAL vLLM CPU `--demo` boxes behind the real vllm-router.

Each box is a local qwen-tui supervisor with its own QWEN_TUI_HOME, on 8011 and 8012, its OpenMP
threads bound to one core each (VLLM_CPU_OMP_THREADS_BIND). `qwen-tui cluster serve` starts them and
the router; `cluster status --json` must show both healthy; then kill -9 of box2's engine
(VLLM::EngineCore) while the console's cluster view (key n, App.run_test) watches: requests through
the router keep succeeding, the view shows box2 UNHEALTHY, then healthy again once its own supervisor
restarted it. One test, about 4-6 minutes on 2 busy cores (two starts of the demo plus one restart).
Skipped where vllm-router is not installed (pip install 'qwen-tui[router]'), like tier 2.
"""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import psutil
import pytest

from tests.helpers.cluster import box_cli, cli, cluster_toml, make_demo_box, router_bin

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(router_bin() is None, reason="vllm-router is not installed "
                                 "(pip install 'qwen-tui[router]')")]

START_S = 600  # a demo start on one core while the other box warms up


def vllm_processes() -> list[psutil.Process]:
    from backend.server import procs

    return procs.find_vllm_processes()


def ours(where) -> list[psutil.Process]:
    """Every process of this test's boxes and router (their QWEN_TUI_HOME is under `where`)."""
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != os.getpid() and str(where) in p.environ().get("QWEN_TUI_HOME", ""):
                found.append(p)
        except psutil.Error:
            continue
    return found


def engine_pid(box: dict) -> int:
    """The box's VLLM::EngineCore (a child of the API process its `status --json` names)."""
    st = json.loads(box_cli(box, "status", "--json", timeout=60).stdout)
    for child in psutil.Process(st["pid"]).children(recursive=True):
        try:
            if "EngineCore" in child.name() or "EngineCore" in " ".join(child.cmdline()):
                return child.pid
        except psutil.Error:
            continue
    raise AssertionError(f"no EngineCore under the API process {st['pid']} of {box['name']}")


@pytest.fixture
def demo_cluster(tmp_path, qhome, vllm_lock):
    assert not vllm_processes(), "vLLM processes are already running on this machine"
    cores = os.cpu_count() or 1
    boxes = [make_demo_box(tmp_path, "box1", 8011, core=0), make_demo_box(tmp_path, "box2", 8012, core=1 % cores)]
    text = cluster_toml(boxes).replace("ready_timeout_s = 60\n", f"ready_timeout_s = {START_S}\n")
    cfg = tmp_path / "cluster.toml"
    cfg.write_text("[server]\nmodel = \"qwen-tui-demo\"\n\n[console]\non_exit = \"keep\"\n\n" + text)
    try:
        t0 = time.time()
        r = cli(cfg, "cluster", "serve", "--json", timeout=2 * START_S + 120)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        print(f"cluster serve: {time.time() - t0:.1f} s")
        yield cfg, boxes
    finally:
        r = cli(cfg, "cluster", "stop", "--json", timeout=300)
        left = ours(tmp_path)
        for p in left:  # never leave a server behind, even when the test failed
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=10)
        assert r.returncode == 0, r.stdout + r.stderr
        assert not left, f"left after cluster stop: {[p.pid for p in left]}"
        assert not vllm_processes()


def _chat(client: httpx.AsyncClient, url: str):
    return client.post(url + "/v1/chat/completions", json={
        "model": "qwen-tui-demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})


async def test_two_demo_boxes_behind_the_router_a_killed_engine_goes_unhealthy_and_back(demo_cluster):
    from backend.server.client import Poll
    from backend.settings import load
    from tests.helpers.console import PARSED, ScriptedClient
    from tui.app import make_app
    from tui.screens.cluster import ClusterScreen

    cfg, boxes = demo_cluster
    r = cli(cfg, "cluster", "status", "--json")
    st = json.loads(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr  # exit 0: every box healthy in a ready router
    assert st["router"]["ready"] and (st["router"]["healthy_workers"], st["router"]["total_workers"]) == (2, 2)
    for b in st["boxes"]:
        assert b["state"] == "ready" and b["healthy"] and b["in_router"] and b["router_healthy"], b
        assert b["kv_tokens"] > 0 and b["max_concurrency"] > 1 and b["error"] is None, b
    router = st["router"]["url"]

    app = make_app(load(config=str(cfg)), ScriptedClient([Poll(state={"state": "stopped"}, parsed=PARSED)]))
    async with app.run_test(size=(160, 40)) as pilot, httpx.AsyncClient(timeout=60, trust_env=False) as client:
        async def until(pred, timeout: float) -> float | None:
            t = time.time()
            while time.time() - t < timeout:
                if pred():
                    return round(time.time() - t, 1)
                await pilot.pause(0.2)
            return None

        def cell(box: str, column: int) -> str:
            screen = app.screen
            return str(screen.query_one("DataTable").get_cell(box, screen._cols[column]))

        await pilot.press("n")
        assert await until(lambda: isinstance(app.screen, ClusterScreen), 10) is not None
        screen = app.screen
        assert await until(lambda: screen.status is not None and all(
            cell(b, 2) == "ok" and cell(b, 3) == "healthy" for b in ("box1", "box2")), 60) is not None
        assert "2/2 workers healthy" in str(screen.query_one("#router").render())

        pid = engine_pid(boxes[1])
        os.kill(pid, signal.SIGKILL)
        t_kill = time.time()
        codes = []
        down = None
        while time.time() - t_kill < 60 and down is None:  # requests go on while the view catches up
            codes.append((await _chat(client, router)).status_code)
            if cell("box2", 3) == "UNHEALTHY":
                down = round(time.time() - t_kill, 1)
            await pilot.pause(0.2)
        assert down is not None, f"box2 never shown UNHEALTHY: {cell('box2', 3)} / {cell('box2', 2)}"
        assert cell("box1", 3) == "healthy" and cell("box1", 2) == "ok"
        assert "1/2 workers healthy" in str(screen.query_one("#router").render())
        assert codes and all(c == 200 for c in codes), codes  # the router sent them to box1 (or retried there)

        back = await until(lambda: cell("box2", 2) == "ok" and cell("box2", 3) == "healthy", START_S)
        assert back is not None, f"box2 not back: {cell('box2', 1)} / {cell('box2', 2)} / {cell('box2', 3)}"
        back = round(time.time() - t_kill, 1)
        assert await until(lambda: cell("box2", 1) == "ready", 30) is not None
        assert "2/2 workers healthy" in str(screen.query_one("#router").render())
        assert all([(await _chat(client, router)).status_code == 200 for _ in range(4)])
        print(f"kill -9 of box2's engine (pid {pid}): UNHEALTHY in the view after {down} s "
              f"({len(codes)} requests meanwhile, all 200); healthy again after {back} s")
        await pilot.press("escape")
    st = json.loads(cli(cfg, "cluster", "status", "--json").stdout)
    row = {b["name"]: b for b in st["boxes"]}["box2"]
    assert row["healthy"] and row["router_healthy"] and row["state"] == "ready"
