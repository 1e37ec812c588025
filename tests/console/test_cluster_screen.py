"""The console's cluster view (key n) against STUB OpenAI servers: a box goes unhealthy and comes back;
drain and undrain through the real vllm-router, each confirmed (skipped without vllm-router)."""

from __future__ import annotations

import json
import threading

import pytest

from backend.cluster import router as rt
from backend.cluster.config import load_cluster
from backend.server.client import Poll
from backend.settings import load
from tests.helpers.cluster import cluster_toml, router_bin, wait_for
from tests.helpers.console import PARSED, ScriptedClient
from tests.helpers.stub_openai import StubServer
from tui.app import make_app
from tui.screens.cluster import ClusterScreen
from tui.screens.confirm import ConfirmScreen

STATUS = json.dumps({"state": "ready", "kv_cache_tokens": 63000, "max_concurrency": 7.7})


def _config(tmp_path, stubs, router: bool) -> str:
    """Boxes whose `qwen-tui status --json` is a fixed answer (sh -c echo) and whose API is a stub."""
    boxes = [{"name": f"box{i + 1}", "api_url": s.base_url, "config": "unused", "home": tmp_path}
             for i, s in enumerate(stubs)]
    text = cluster_toml(boxes)
    text = text.replace('config = "unused"\n', "").replace('transport = "local"\n',
                                                          f"transport = \"local\"\nqwen_tui = [\"sh\", \"-c\", "
                                                          f"{json.dumps('echo ' + repr(STATUS))}]\n")
    if not router:
        text = text.replace('router = "vllm-router"', 'router = "none"')
    cfg = tmp_path / "cluster.toml"
    cfg.write_text("[console]\non_exit = \"keep\"\n\n" + text)
    return str(cfg)


def _app(cfg: str):
    return make_app(load(config=cfg), ScriptedClient([Poll(state={"state": "stopped"}, parsed=PARSED)]))


async def wait_until(pilot, pred, timeout: float = 5.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        await pilot.pause(0.05)
    return False


def _cell(screen: ClusterScreen, box: str, column: int) -> str:
    table = screen.query_one("DataTable")
    return str(table.get_cell(box, screen._cols[column]))


async def test_n_opens_the_cluster_view_and_a_box_goes_unhealthy_and_back(qhome, tmp_path):
    a, b = StubServer(box="a").start(), StubServer(box="b").start()
    port = b.port
    try:
        app = _app(_config(tmp_path, [a, b], router=False))
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.press("n")
            assert await wait_until(pilot, lambda: isinstance(app.screen, ClusterScreen))
            screen = app.screen
            screen.poll_s = 0.3
            assert await wait_until(pilot, lambda: screen.status is not None, timeout=20)
            assert _cell(screen, "box1", 1) == "ready" and _cell(screen, "box2", 2) == "ok"
            assert _cell(screen, "box1", 6) == "63,000"
            assert "router: none" in str(screen.query_one("#router").render())
            b.stop()  # box2 goes away
            assert await wait_until(pilot, lambda: _cell(screen, "box2", 2) == "DOWN", timeout=20)
            assert _cell(screen, "box1", 2) == "ok"
            b = StubServer(port=port, box="b").start()  # and comes back on its port
            assert await wait_until(pilot, lambda: _cell(screen, "box2", 2) == "ok", timeout=20)
            await pilot.press("d")  # no router: said, no dialog
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmScreen)
            await pilot.press("escape")
            assert await wait_until(pilot, lambda: not isinstance(app.screen, ClusterScreen))
    finally:
        a.stop()
        b.stop()


async def test_without_a_cluster_n_says_so(qhome, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[console]\non_exit = \"keep\"\n")
    app = _app(str(cfg))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("n")
        await pilot.pause()
        assert not isinstance(app.screen, ClusterScreen)


@pytest.mark.skipif(router_bin() is None, reason="vllm-router is not installed (pip install 'qwen-tui[router]')")
async def test_drain_and_undrain_from_the_view_are_confirmed_and_reach_the_router(qhome, tmp_path):
    a, b = StubServer(box="a").start(), StubServer(box="b").start()
    cfg = _config(tmp_path, [a, b], router=True)
    cluster = load_cluster(load(config=cfg))
    sup = rt.RouterSupervisor(cluster)
    t = threading.Thread(target=sup.run, daemon=True)
    t.start()
    client = rt.RouterClient(cluster.router_url)
    try:
        assert wait_for(lambda: rt.wait_listening(cluster.router_url, 1) and
                        client.readiness()["healthy_workers"] == 2, 30)
        app = _app(cfg)
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.press("n")
            assert await wait_until(pilot, lambda: isinstance(app.screen, ClusterScreen))
            screen = app.screen
            screen.poll_s = 0.3
            assert await wait_until(pilot, lambda: _cell(screen, "box1", 3) == "healthy", timeout=20)
            await pilot.press("d")  # box1 is highlighted
            assert await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("n")  # no: nothing happens
            await pilot.pause()
            assert a.base_url in client.workers()
            await pilot.press("d")
            assert await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            assert await wait_until(pilot, lambda: _cell(screen, "box1", 3) == "drained", timeout=20)
            assert a.base_url not in client.workers()
            await pilot.press("u")
            await pilot.press("y")
            assert await wait_until(pilot, lambda: _cell(screen, "box1", 3) == "healthy", timeout=20)
            assert a.base_url in client.workers() and not screen.busy
            log = "\n".join(screen.query_one("Log").lines)
            assert "drain box1: done" in log and "undrain box1: done" in log
    finally:
        client.close()
        sup.request_stop()
        t.join(20)
        a.stop()
        b.stop()
