"""[cluster] parsing, the transports' argv, the router's command line, shares (no server needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from backend.cluster import ops, transport
from backend.cluster import router as rt
from backend.cluster.config import Box, bind_problem, from_data, load_cluster
from backend.settings import ConfigError, load, parse_toml
from tests.helpers import ROOT

TWO = """
[server]
port = 8000

[cluster]
router_url = "http://127.0.0.1:30000"
health_interval_s = 3

[[cluster.box]]
name = "box1"
api_url = "http://127.0.0.1:8000"

[[cluster.box]]
name = "box2"
transport = "ssh"
ssh = ["ssh", "-o", "BatchMode=yes", "team@box2"]
qwen_tui = "~/qwen-tui/.venv/bin/qwen-tui"
config = "~/qwen-tui/config.toml"
api_url = "http://10.0.0.12:8000"
"""


def _cluster(text: str, where: str = "c.toml"):
    return from_data(parse_toml(text, where), where, text)


def test_no_cluster_section_is_the_single_box_of_today(qhome, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[server]\nport = 8001\n")
    settings = load(config=str(cfg))
    assert load_cluster(settings) is None and settings.server["port"] == 8001


def test_a_cluster_file_still_loads_for_every_other_command(qhome, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(TWO)
    settings = load(config=str(cfg))  # [cluster] is not an "unknown section" for serve, status...
    assert settings.server["port"] == 8000
    c = load_cluster(settings)
    assert [b.name for b in c.boxes] == ["box1", "box2"]
    assert c.router == "vllm-router" and c.router_policy == "cache_aware" and c.health_interval_s == 3
    assert c.box("box2").ssh == ("ssh", "-o", "BatchMode=yes", "team@box2")
    with pytest.raises(ConfigError, match="no box named 'box3'"):
        c.box("box3")


@pytest.mark.parametrize("edit, message", [
    (("health_interval_s = 3", "health_interval_s = 0"), "c.toml:7: cluster.health_interval_s = 0: must be 1 to 3600"),
    (("health_interval_s = 3", "policy = 1"), "c.toml:7: unknown key cluster.policy"),
    (("health_interval_s = 3", 'router_policy = "fastest"'), "choose one of cache_aware"),
    (('router_url = "http://127.0.0.1:30000"', 'router_url = "http://0.0.0.0:30000"'),
     "c.toml:6: router_url binds every interface"),
    (('router_url = "http://127.0.0.1:30000"', 'router_url = "http://8.8.8.8:30000"'), "public address"),
    (('api_url = "http://10.0.0.12:8000"', ""), "c.toml:13: box box2: api_url is required"),
    (('ssh = ["ssh", "-o", "BatchMode=yes", "team@box2"]', ""), 'transport = "ssh" needs ssh'),
    (('name = "box2"', 'name = "box1"'), "box names must be unique"),
    (('name = "box2"', 'name = "a b"'), "name must be letters"),
    (('transport = "ssh"', 'transport = "telnet"'), "choose local or ssh"),
    (('api_url = "http://10.0.0.12:8000"', 'api_url = "10.0.0.12:8000"'), "not an http(s) URL"),
])
def test_bad_cluster_values_name_the_file_and_line(edit, message):
    with pytest.raises(ConfigError) as e:
        _cluster(TWO.replace(*edit))
    assert message in str(e.value)


def test_the_router_binds_only_loopback_or_private_addresses():
    assert bind_problem("http://127.0.0.1:1") is None and bind_problem("http://10.1.2.3:1") is None
    assert bind_problem("http://localhost:1") is None
    assert "every interface" in bind_problem("http://0.0.0.0:1") and "every interface" in bind_problem("http://[::]:1")
    assert "public" in bind_problem("http://1.1.1.1:1") and "not an IP" in bind_problem("http://box.example:1")


def test_router_command_from_the_cluster_table():
    c = _cluster(TWO)
    argv = rt.command(c)
    assert argv[0].endswith("vllm-router")
    s = " ".join(argv)
    assert "--host 127.0.0.1 --port 30000" in s
    assert "--worker-urls http://127.0.0.1:8000 http://10.0.0.12:8000" in s
    assert "--policy cache_aware" in s and "--health-check-interval-secs 3" in s
    assert "--prometheus-host 127.0.0.1 --prometheus-port 29000" in s
    assert "--worker-urls" not in " ".join(rt.command(c, []))  # the supervisor may start with none
    none = _cluster(TWO.replace('router_url = "http://127.0.0.1:30000"', 'router = "none"'))
    with pytest.raises(rt.RouterError, match="no router"):
        rt.command(none)


def test_transport_argv_local_and_ssh():
    c = _cluster(TWO)
    local = transport.argv(c.box("box1"), ["status", "--json"])
    assert local == [sys.executable, "-m", "backend.cli", "status", "--json"]
    ssh = transport.argv(c.box("box2"), ["status", "--json"])
    assert ssh[:4] == ["ssh", "-o", "BatchMode=yes", "team@box2"]
    # one shell string for the remote shell; ~/ left for it to expand, the rest quoted
    assert ssh[4] == "~/qwen-tui/.venv/bin/qwen-tui --config ~/qwen-tui/config.toml status --json"
    odd = Box(name="b", api_url="http://127.0.0.1:1", transport="ssh", ssh=("ssh", "h"), config="/p/a b;rm")
    assert transport.argv(odd, ["status"])[-1].endswith("--config '/p/a b;rm' status")


def test_ssh_transport_runs_a_shell_string_through_its_prefix(tmp_path):
    """`sh -c` stands in for ssh: the same argv-prefix contract, on this machine."""
    home = tmp_path / "remote-home"
    box = Box(name="r", api_url="http://127.0.0.1:9", transport="ssh",
              ssh=("env", f"QWEN_TUI_HOME={home}", f"PYTHONPATH={ROOT}", "sh", "-c"),
              qwen_tui=(sys.executable, "-m", "backend.cli"))
    ans = transport.run(box, ["status", "--json"], timeout=60)
    assert ans.error is None and ans.data["state"] == "stopped"
    gone = Box(name="g", api_url="http://127.0.0.1:9", transport="ssh", ssh=("sh", "-c"),
               qwen_tui=("/nonexistent/qwen-tui",))
    ans = transport.run(gone, ["status", "--json"], timeout=30)
    assert ans.data is None and ans.error.startswith("g: ") and "not found" in ans.error
    slow = Box(name="s", api_url="http://127.0.0.1:9", transport="ssh", ssh=("sh", "-c"), qwen_tui=("sleep", "5"))
    ans = transport.run(slow, [], timeout=0.5)
    assert ans.data is None and "no answer from s in 0.5 s" in ans.error


def test_shares_from_counter_deltas():
    rows = [ops.BoxRow("a", "u1", "local", requests_total=30.0), ops.BoxRow("b", "u2", "local", requests_total=10.0),
            ops.BoxRow("c", "u3", "local")]
    ops.shares(rows)
    assert [r.share for r in rows] == [0.75, 0.25, None]
    ops.shares(rows, before={"a": 30.0, "b": 0.0})
    assert [r.share for r in rows] == [0.0, 1.0, None]
    got = ops.share_between({"a": 10.0, "b": 50.0, "c": None}, {"a": 20.0, "b": 5.0, "c": 7.0})
    # b restarted (its counter went down): it counts from 0
    assert got == {"a": {"requests": 10, "share": 0.4545}, "b": {"requests": 5, "share": 0.2273},
                   "c": {"requests": 7, "share": 0.3182}}


def test_cluster_commands_without_a_cluster_say_so(qhome, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[server]\nport = 8001\n")
    r = subprocess.run([sys.executable, "-m", "backend.cli", "--config", str(cfg), "cluster", "status", "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60, env=dict(os.environ))
    assert r.returncode == 2 and "no [cluster] in" in r.stderr and "Traceback" not in r.stderr
    cfg.write_text(TWO.replace("health_interval_s = 3", "health_interval_s = -1"))
    r = subprocess.run([sys.executable, "-m", "backend.cli", "--config", str(cfg), "router", "print-command",
                        "--json"], capture_output=True, text=True, cwd=ROOT, timeout=60, env=dict(os.environ))
    assert r.returncode == 2 and "c.toml:7" in r.stderr and "Traceback" not in r.stderr
    cfg.write_text(TWO)
    r = subprocess.run([sys.executable, "-m", "backend.cli", "--config", str(cfg), "router", "print-command",
                        "--json"], capture_output=True, text=True, cwd=ROOT, timeout=60, env=dict(os.environ))
    assert r.returncode == 0 and json.loads(r.stdout)["argv"][1:3] == ["--host", "127.0.0.1"]


def test_a_status_with_the_last_one_reads_only_http(qhome, monkeypatch):
    """The console asks each box's own status less often: with `last`, only /health and /metrics."""
    from tests.helpers.stub_openai import StubServer

    with StubServer() as stub:
        text = ('[cluster]\nrouter = "none"\n\n[[cluster.box]]\nname = "b"\n'
                f'qwen_tui = ["sh", "-c", "echo \'{{\\"state\\": \\"ready\\"}}\'"]\napi_url = "{stub.base_url}"\n')
        c = _cluster(text)
        first = ops.status(c)
        assert first.boxes[0].state == "ready" and first.boxes[0].healthy and first.boxes[0].requests_total == 0
        monkeypatch.setattr(transport, "run", lambda *a, **k: pytest.fail("asked the box's own status again"))
        again = ops.status(c, first)
        assert again.boxes[0].state == "ready" and again.boxes[0].healthy and again.router.kind == "none"
        stub.stop()
        gone = ops.status(c, first)
        assert gone.boxes[0].healthy is False and gone.boxes[0].state == "ready"  # said at the next full look


def test_the_routers_count_comes_from_the_same_answer_as_the_rows(monkeypatch):
    # e2e: /readiness said 2/2 a moment before /workers marked box2 unhealthy; the view showed both
    class Between:
        def __init__(self, url, timeout=3.0):
            pass

        def readiness(self):
            return {"ready": True, "healthy_workers": 2, "total_workers": 2}

        def workers(self):
            return {"http://127.0.0.1:8000": {"is_healthy": True}, "http://127.0.0.1:8001": {"is_healthy": False}}

        def breakers(self, metrics_url):
            return {}

        def close(self):
            pass

    monkeypatch.setattr(rt, "RouterClient", Between)
    monkeypatch.setattr(rt, "status", lambda: {"state": "ready"})
    view, workers = ops.router_view(_cluster(TWO))
    assert (view.healthy_workers, view.total_workers) == (1, 2)
    assert workers is not None and not workers["http://127.0.0.1:8001"]["is_healthy"]
