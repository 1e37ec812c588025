"""Tier 2: the real vllm-router (the `router` extra) in front of STUB OpenAI servers on loopback.

Skipped only where vllm-router is not installed. The stubs are tests/helpers/stub_openai.py, not vLLM.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import httpx
import pytest

from backend.cluster import ops
from backend.cluster import router as rt
from backend.cluster.config import from_data
from backend.settings import parse_toml
from tests.helpers.cluster import (
    ROOT,
    box_cli,
    cli,
    cli_argv,
    cli_env,
    cluster_toml,
    free_port,
    get,
    make_box,
    router_bin,
    wait_for,
)
from tests.helpers.stub_openai import StubServer

pytestmark = pytest.mark.skipif(router_bin() is None, reason="vllm-router is not installed "
                                "(pip install 'qwen-tui[router]')")


def _chat(url: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", timeout=10, trust_env=False,
                      json={"model": "stub-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})


@pytest.fixture
def stubs_and_router(tmp_path, qhome):
    """Two in-process stubs and a supervised vllm-router (RouterSupervisor in a thread)."""
    a, b = StubServer(box="a").start(), StubServer(box="b").start()
    boxes = [{"name": "box1", "api_url": a.base_url, "config": "x", "home": tmp_path},
             {"name": "box2", "api_url": b.base_url, "config": "x", "home": tmp_path}]
    text = cluster_toml(boxes)
    cluster = from_data(parse_toml(text, "c.toml"), "c.toml", text)
    sup = rt.RouterSupervisor(cluster)
    t = threading.Thread(target=sup.run, daemon=True)
    t.start()
    assert rt.wait_listening(cluster.router_url, 20)
    client = rt.RouterClient(cluster.router_url)
    assert wait_for(lambda: client.readiness()["healthy_workers"] == 2, 20)
    yield cluster, client, {"box1": a, "box2": b}
    client.close()
    sup.request_stop()
    t.join(20)
    for s in (a, b):
        try:
            s.stop()
        except Exception:
            pass
    assert rt.status()["state"] == "stopped"


def test_kill_one_stub_readiness_one_of_two_and_requests_still_succeed(stubs_and_router):
    cluster, client, stubs = stubs_and_router
    stubs["box2"].stop()  # the box goes away
    codes = [_chat(cluster.router_url).status_code for _ in range(6)]
    assert codes == [200] * 6  # the router retries on the live box
    assert wait_for(lambda: client.readiness()["healthy_workers"] == 1, 15)
    r = client.readiness()
    assert r["ready"] and r["total_workers"] == 2
    assert get(cluster.router_url + "/health").status_code == 503  # why /health is never read
    st = ops.status(cluster)
    rows = {b.name: b for b in st.boxes}
    assert st.router.ready and st.router.healthy_workers == 1
    assert rows["box2"].router_healthy is False and rows["box2"].healthy is False and rows["box2"].in_router
    assert rows["box1"].router_healthy and not st.all_healthy
    assert rows["box1"].breaker_open is False  # read from vllm_router_cb_state
    # a breaker's series appears once the router sent that worker a request
    breakers = client.breakers(cluster.router_metrics_url)
    assert stubs["box1"].base_url in breakers and set(breakers) <= {stubs["box1"].base_url, stubs["box2"].base_url}


def test_drain_and_undrain_round_trip(stubs_and_router):
    cluster, client, stubs = stubs_and_router
    out = ops.drain(cluster, "box1")
    assert out["ok"] and not out["timed_out"]
    assert cluster.box("box1").api_url not in client.workers() and rt.drained() == {"box1"}
    before = stubs["box1"].state.success
    assert all(_chat(cluster.router_url).status_code == 200 for _ in range(6))
    assert stubs["box1"].state.success == before  # a drained box gets nothing
    row = {b.name: b for b in ops.status(cluster).boxes}["box1"]
    assert row.drained and row.in_router is False and row.healthy
    with pytest.raises(ops.ClusterError, match="only healthy box"):
        ops.drain(cluster, "box2")  # it would stop the service
    out = ops.undrain(cluster, "box1")
    assert out["ok"] and cluster.box("box1").api_url in client.workers() and rt.drained() == set()
    assert wait_for(lambda: client.readiness()["healthy_workers"] == 2, 10)
    for _ in range(8):
        assert _chat(cluster.router_url).status_code == 200
    assert stubs["box1"].state.success > before  # back in the rotation (round robin)


def test_undrain_waits_for_the_box_and_never_adds_a_dead_url(stubs_and_router):
    cluster, client, stubs = stubs_and_router
    ops.drain(cluster, "box2", force=True)
    stubs["box2"].stop()
    t0 = time.time()
    with pytest.raises(ops.ClusterError, match="did not answer 200 within 1 s; not added"):
        ops.undrain(cluster, "box2", timeout=1)
    assert time.time() - t0 < 5  # it did not block on the router's add_worker
    assert cluster.box("box2").api_url not in client.workers() and rt.drained() == {"box2"}


def test_rolling_restart_through_the_real_router_fails_no_request(tmp_path, qhome):
    """Two local stub boxes under real supervisors, the router detached by `cluster serve`, a bench
    through the router while `cluster restart` drains, restarts and undrains each box in turn."""
    boxes = [make_box(tmp_path, "box1", token_delay=0.02), make_box(tmp_path, "box2", token_delay=0.02)]
    cfg = tmp_path / "cluster.toml"
    cfg.write_text("[server]\nmodel = \"stub-model\"\n\n" + cluster_toml(boxes))
    try:
        r = cli(cfg, "cluster", "serve", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        served = json.loads(r.stdout)
        assert served["router"]["state"] == "running"
        st = json.loads(cli(cfg, "cluster", "status", "--json").stdout)
        assert st["router"]["healthy_workers"] == 2 and all(b["router_healthy"] for b in st["boxes"])
        router_url = st["router"]["url"]

        bench = subprocess.Popen(cli_argv(cfg, "bench", "--url", router_url, "--requests", "400",
                                          "--concurrency", "4", "--max-tokens", "10", "--json"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=ROOT)
        time.sleep(1.5)
        r = cli(cfg, "cluster", "restart", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        rolled = json.loads(r.stdout)
        assert [b["box"] for b in rolled["boxes"]] == ["box1", "box2"]
        assert all(b["drain"]["ok"] and b["serve"]["ok"] and b["undrain"]["ok"] for b in rolled["boxes"])
        out, err = bench.communicate(timeout=180)
        rep = json.loads(out)
        assert rep["failed"] == 0 and rep["completed"] == 400, rep["errors"][:3]
        assert set(rep["per_box"]) == {"box1", "box2"}
        st = json.loads(cli(cfg, "cluster", "status", "--json").stdout)
        assert st["router"]["healthy_workers"] == 2 and [b["state"] for b in st["boxes"]] == ["ready", "ready"]
    finally:
        cli(cfg, "cluster", "stop")
        for b in boxes:
            box_cli(b, "stop")
    assert rt.status()["state"] == "stopped"


def test_router_serve_refuses_a_second_router_and_stops_cleanly(tmp_path, qhome):
    a = StubServer(box="a").start()
    try:
        cfg = tmp_path / "cluster.toml"
        cfg.write_text(cluster_toml([{"name": "box1", "api_url": a.base_url, "config": "x", "home": tmp_path}],
                                    router_port=free_port()))
        r = cli(cfg, "router", "serve", "--detach", "--json")
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        assert st["state"] == "running" and st["workers_at_start"] == [a.base_url]
        again = cli(cfg, "router", "serve", "--detach")
        assert again.returncode == 1 and "already runs" in again.stderr
        r = cli(cfg, "router", "status", "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["healthy_workers"] == 1
        stop = cli(cfg, "router", "stop", "--json")
        assert stop.returncode == 0 and json.loads(stop.stdout)["ok"]
        assert get(st["url"] + "/readiness") is None  # nothing listens any more
    finally:
        cli(cfg, "router", "stop")
        a.stop()
