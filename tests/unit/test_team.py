"""Issue 26: a teammate's server (another live supervisor's, any state dir) is not an orphan:
listed with its user, port, state, memory and uptime; doctor WARNs; serve does not refuse."""

from __future__ import annotations

import argparse

import pytest

from backend.cli import commands
from backend.doctor import check_gpu_memory
from backend.server import orphans, owners
from backend.server.owners import SupervisorInfo, TeamServer
from backend.server.procs import ProcInfo
from tests.helpers.console import NoNvml
from tests.helpers.doctor import run, settings
from tests.helpers.fake_supervisor import start_fake_supervisor
from tests.helpers.procs import VLLM_LIKE

GiB = 1 << 30


@pytest.fixture
def teammate(tmp_path, spawn):
    """A live supervisor under another state dir, port 8123, running a vLLM-like tree."""
    home = tmp_path / "alice-home"
    proc, write = start_fake_supervisor(tmp_path, home=home)
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    write(path=home / "state" / "server.json", port=8123, pid=tree.pids["api"], pgid=tree.pgid,
          started_at=1000.0)
    yield proc, tree, home
    proc.kill()
    proc.wait()


def sup(pid=4000, user="alice", port=8001, state="ready", owned=(4000, 4001, 4002), started_at=None):
    return SupervisorInfo(pid, 100.0, 1234, user, "/home/alice/.local/state/qwen-tui", port, state, "qwen-tui serve",
                          owned, started_at)


def test_a_teammates_processes_are_its_server_not_orphans(qhome, teammate):
    proc, tree, home = teammate
    found = orphans.scan({}, monitor=NoNvml())
    assert not {p.pid for p in found.orphans} & set(tree.pids.values())
    server = next(t for t in found.servers if t.sup.pid == proc.pid)
    assert server.port == 8123 and server.sup.state == "ready" and server.sup.state_dir == str(home / "state")
    assert set(tree.pids.values()) <= set(server.pids) and server.rss_bytes > 0
    text = found.describe()
    assert f"{server.user}'s server on port 8123 (ready, {home / 'state'}" in text and "RAM" in text
    assert "not orphans" in text
    d = found.to_dict()
    assert tree.pids["engine"] not in d["orphans"] and any(s["port"] == 8123 for s in d["servers"])


def test_serve_preflight_starts_beside_a_teammate_and_says_so(qhome, teammate, capsys):
    proc, tree, home = teammate
    from backend.cli.options import load_settings

    s = load_settings(argparse.Namespace(config=None, demo=True, profile=None, overrides=["server.port=8124"]))
    launch, rc = commands._preflight(argparse.Namespace(allow_orphans=False), s)
    err = capsys.readouterr().err
    assert rc == 0 and launch is not None, err
    assert "beside" in err and "server on port 8123" in err and "orphan" not in err


def test_stop_orphans_lists_a_teammate_as_not_an_orphan(qhome, teammate, capsys):
    proc, tree, home = teammate
    rc = commands._stop_orphans(argparse.Namespace(config=None, demo=True, profile=None, overrides=[], pid=None,
                                                   list=False, json=False, orphans=True))
    out = capsys.readouterr().out
    assert rc == 0 and "no orphaned vLLM or GPU processes" in out and "server on port 8123" in out


def test_team_servers_sum_each_gpu_its_pids_hold():
    class Mon:
        def available(self):
            return True

        def processes_by_gpu(self):
            return {0: {4001: 20 * GiB, 9999: 1 * GiB}, 1: {4002: 18 * GiB}}

    [t] = owners.team_servers([sup(started_at=1000.0)], Mon(), now=1000.0 + 725)
    assert t.gpu_bytes == {0: 20 * GiB, 1: 18 * GiB} and t.uptime_s == 725
    assert t.describe() == ("alice's server on port 8001 (ready, /home/alice/.local/state/qwen-tui, "
                            "supervisor pid 4000, up 12 min): holds GPU0 20.0 GiB + GPU1 18.0 GiB")


def test_doctor_warns_with_the_facts_and_never_says_kill(env):
    team = TeamServer(sup(), (4001, 4002), {0: 20 * GiB}, 2 * GiB, 600.0)
    env.servers = lambda s, m: [team]
    c = run(check_gpu_memory, settings(), env)
    assert c.status == "warn" and "alice's server on port 8001" in c.message and "GPU0 20.0 GiB" in c.message
    assert "up 10 min" in c.message and "not orphans" in c.message
    assert "kill" not in (c.fix or "") and "stop --orphans" not in (c.fix or "") and "alice" in c.fix


def test_doctor_fails_for_an_orphan_beside_a_teammate_and_names_both(env):
    team = TeamServer(sup(), (4001,), {}, 2 * GiB, 60.0)
    env.servers = lambda s, m: [team]
    env.processes = lambda s, m: [ProcInfo(4242, 1, 4242, "python", "VLLM::Worker_TP0", GiB, 0.0, 14 * GiB,
                                           role="worker")]
    c = run(check_gpu_memory, settings(), env)
    assert c.status == "fail" and "1 orphan (" in c.message and "beside alice's server" in c.message
    assert "4242" in c.fix and "4001" not in c.fix


def test_the_verdict_beside_a_teammate_names_who_holds_what_is_missing():
    from backend.beside import verdict

    team = TeamServer(sup(), (4001,), {0: 20 * GiB}, 2 * GiB, 60.0)
    assert verdict(10 * GiB, 12 * GiB, []) is None
    ok = verdict(10 * GiB, 12 * GiB, [team])
    assert ok.fits and ok.text.startswith("fits beside alice's server on port 8001")
    short = verdict(15 * GiB, 12 * GiB, [team])
    assert not short.fits and short.text.startswith("needs 3.0 GiB that alice's server on port 8001 holds")


def test_doctor_fails_when_the_plan_does_not_fit_beside_them_and_still_never_says_kill(env, monkeypatch):
    from backend import beside

    team = TeamServer(sup(), (4001,), {0: 20 * GiB}, 2 * GiB, 60.0)
    env.servers = lambda s, m: [team]
    monkeypatch.setattr(beside, "check", lambda led, servers, mon=None: beside.verdict(22 * GiB, 4 * GiB, servers))
    c = run(check_gpu_memory, settings(), env)
    assert c.status == "fail" and "needs 18.0 GiB that alice's server on port 8001 holds" in c.message
    assert "kill" not in c.fix and "gpu_memory_utilization" in c.fix and "alice" in c.fix


def test_plan_json_says_whether_it_fits_beside_a_teammate(qhome, teammate, capsys):
    proc, tree, home = teammate
    rc = commands.cmd_plan(argparse.Namespace(config=None, demo=True, profile=None, overrides=[], json=True))
    import json

    data = json.loads(capsys.readouterr().out)
    assert 8123 in [t["port"] for t in data["beside"]["servers"]] and data["beside"]["need_bytes"] > 0
    assert data["beside"]["summary"].startswith(("fits beside", "needs ")) and rc in (0, 1)
