"""Tier 1: two "boxes", each a real local qwen-tui supervisor with its own QWEN_TUI_HOME, serving a
STUB OpenAI server (tests/helpers/stub_openai.py, not vLLM), reached through the local transport; no router."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.helpers.cluster import box_cli, cli, cluster_toml, make_box, wait_for


@pytest.fixture
def boxes(tmp_path, qhome):
    made = [make_box(tmp_path, "box1"), make_box(tmp_path, "box2")]
    yield made
    for b in made:
        box_cli(b, "stop")


def test_serve_status_kill_and_stop_two_local_boxes_without_a_router(tmp_path, qhome, boxes):
    cfg = tmp_path / "cluster.toml"
    cfg.write_text(cluster_toml(boxes).replace('router = "vllm-router"', 'router = "none"'))
    r = cli(cfg, "cluster", "serve", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [b["state"] for b in out["boxes"]] == ["ready", "ready"] and out["router"] is None
    again = cli(cfg, "cluster", "serve", "--json")  # already running and READY: fine, nothing started
    assert again.returncode == 0 and all(b["ok"] for b in json.loads(again.stdout)["boxes"]), again.stderr

    r = cli(cfg, "cluster", "status", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    st = json.loads(r.stdout)
    assert st["router"]["kind"] == "none"
    rows = {b["name"]: b for b in st["boxes"]}
    assert all(b["reachable"] and b["healthy"] and b["state"] == "ready" for b in rows.values())
    assert rows["box1"]["kv_tokens"] == 63000 and rows["box1"]["max_concurrency"] == pytest.approx(7.69)
    assert rows["box1"]["running"] == 0 and rows["box1"]["in_router"] is None

    # the text view has one row per box
    text = cli(cfg, "cluster", "status").stdout
    assert "router: none" in text and text.count("ready") >= 2

    pid = json.loads(box_cli(boxes[1], "status", "--json").stdout)["pid"]
    os.kill(pid, signal.SIGKILL)  # box2's "engine" dies; its supervisor does not restart it (restart=never)

    def box2_down():
        st = json.loads(cli(cfg, "cluster", "status", "--json").stdout)
        return {b["name"]: b for b in st["boxes"]}["box2"]

    assert wait_for(lambda: not box2_down()["healthy"], 20, 0.3)
    row = box2_down()
    assert row["reachable"] and row["state"] == "failed" and row["error"]
    assert cli(cfg, "cluster", "status").returncode == 1

    r = cli(cfg, "cluster", "stop", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    st = json.loads(cli(cfg, "cluster", "status", "--json").stdout)
    assert st["boxes"][0]["state"] == "stopped"  # box2 keeps saying why it failed, as one box does
    assert st["boxes"][1]["state"] == "failed" and not st["boxes"][1]["healthy"]


def test_an_unreachable_box_is_a_row_with_its_error(tmp_path, qhome, boxes):
    cfg = tmp_path / "cluster.toml"
    text = cluster_toml(boxes[:1]).replace('router = "vllm-router"', 'router = "none"')
    text += ('\n[[cluster.box]]\nname = "far"\ntransport = "ssh"\nssh = ["sh", "-c"]\n'
             'qwen_tui = "/nonexistent/qwen-tui"\napi_url = "http://127.0.0.1:9"\n')
    cfg.write_text(text)
    r = cli(cfg, "cluster", "status", "--json")
    assert r.returncode == 1
    rows = {b["name"]: b for b in json.loads(r.stdout)["boxes"]}
    assert rows["far"]["reachable"] is False and "not found" in rows["far"]["error"]
    assert rows["box1"]["reachable"] and rows["box1"]["state"] == "stopped"
