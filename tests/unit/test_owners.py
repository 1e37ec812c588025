"""One server per port, whoever started it (issue 20), and orphans of another live supervisor or
another user never offered to kill (issue 17, case 9)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from backend.server import orphans, owners
from tests.helpers.console import NoNvml
from tests.helpers.fake_supervisor import start_fake_supervisor
from tests.helpers.procs import VLLM_LIKE, alive


@pytest.fixture
def other_supervisor(tmp_path):
    """A live supervisor under another state dir, serving port 8123."""
    home = tmp_path / "other-home"
    proc, write = start_fake_supervisor(tmp_path, home=home)
    write.home = home
    yield write
    proc.kill()
    proc.wait()


def test_another_state_dirs_server_is_listed_with_its_owner_and_never_offered(qhome, spawn, other_supervisor):
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    other_supervisor(path=other_supervisor.home / "state" / "server.json", port=8123,
                     pid=tree.pids["api"], pgid=tree.pgid)
    found = orphans.scan({}, monitor=NoNvml())
    sup = next(s for s in found.supervisors if s.pid == other_supervisor.proc.pid)
    assert sup.pid == other_supervisor.proc.pid and sup.port == 8123
    assert sup.state_dir == str(other_supervisor.home / "state")
    assert tree.pids["engine"] in [p.pid for p in found.processes]  # listed ...
    assert tree.pids["engine"] not in found.pids  # ... but not offered
    assert "stop that supervisor instead" in found.refusal(tree.pids["engine"])
    assert f"supervisor pid {sup.pid}" in found.describe()
    with pytest.raises(ValueError, match="killing it would only restart it"):
        orphans.kill([tree.pids["engine"]], found)
    assert alive(tree.pids["engine"])
    # the CLI: `stop --orphans` kills nothing of it
    r = subprocess.run([sys.executable, "-m", "backend.cli", "stop", "--orphans"], capture_output=True,
                       text=True, timeout=60)
    assert alive(tree.pids["engine"]) and alive(tree.pids["api"]) and "Traceback" not in r.stderr


def test_another_supervisor_on_the_port_blocks_a_start(qhome, other_supervisor):
    other_supervisor(path=other_supervisor.home / "state" / "server.json", port=8123)
    free = lambda host, port: None  # noqa: E731
    sups = [s for s in owners.live_supervisors() if s.pid == other_supervisor.proc.pid]  # not other helpers'
    blocked = owners.start_blockers("127.0.0.1", 8123, supervisors=sups, bind=free)
    assert len(blocked) == 1 and f"supervisor pid {other_supervisor.proc.pid}" in blocked[0]
    assert str(other_supervisor.home / "state") in blocked[0] and "stop it first" in blocked[0]
    assert owners.start_blockers("127.0.0.1", 8124, supervisors=sups, bind=free) == []


def test_a_bound_port_blocks_a_start_and_names_its_owner(qhome):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        blocked = owners.start_blockers("127.0.0.1", port, supervisors=[])
    assert len(blocked) == 1 and f"port {port} is already in use by pid {os.getpid()}" in blocked[0]


def test_serve_refuses_to_start_beside_another_supervisor(qhome, other_supervisor):
    other_supervisor(path=other_supervisor.home / "state" / "server.json", port=8123)
    r = subprocess.run([sys.executable, "-m", "backend.cli", "--demo", "--set", "server.port=8123", "serve"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"supervisor pid {other_supervisor.proc.pid}" in r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="a process of another user needs root to start")
def test_another_users_process_is_never_offered(qhome):
    code = ("import os, time; open('/proc/self/comm','w').write('VLLM::EngineCore'); "
            "os.setgid(65534); os.setuid(65534); time.sleep(60)")  # root drops to nobody
    proc = subprocess.Popen([sys.executable, "-c", code], cwd="/")
    try:
        for _ in range(100):
            if psutil.Process(proc.pid).uids().real == 65534:
                break
            time.sleep(0.02)
        found = orphans.scan({}, monitor=NoNvml())
        assert proc.pid in [p.pid for p in found.processes] and proc.pid not in found.pids
        assert "another user (nobody)" in found.refusal(proc.pid)
        with pytest.raises(ValueError, match="another user"):
            orphans.kill([proc.pid], found)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_stop_supervisor_sends_term_to_that_supervisor_only(qhome, other_supervisor):
    sup = next(s for s in owners.live_supervisors() if s.pid == other_supervisor.proc.pid)
    assert "exited" in owners.stop_supervisor(sup, timeout=5)
    assert other_supervisor.proc.wait(timeout=5) == -15
    with pytest.raises(ValueError, match="no longer that supervisor"):
        owners.stop_supervisor(sup, timeout=1)


def test_a_state_dir_under_a_home_is_shown_from_its_tilde(monkeypatch):
    from types import SimpleNamespace

    from backend.server import owners as own

    homes = {"root": "/root", "alice": "/home/alice"}
    monkeypatch.setattr(own.pwd, "getpwuid", lambda uid: SimpleNamespace(pw_name="root"))

    def getpwnam(name):
        if name not in homes:
            raise KeyError(name)
        return SimpleNamespace(pw_dir=homes[name])

    monkeypatch.setattr(own.pwd, "getpwnam", getpwnam)
    assert own.shown_path("/root/.local/state/qwen-tui/state") == "~/.local/state/qwen-tui/state"
    assert own.shown_path("/home/alice/.local/state/qwen-tui/state", "alice") == "~alice/.local/state/qwen-tui/state"
    assert own.shown_path("/home/alicex/s", "alice") == "/home/alicex/s"  # a sibling, not under the home
    assert own.shown_path("/srv/qwen/state", "alice") == "/srv/qwen/state"
    assert own.shown_path("/home/zed/s", "zed") == "/home/zed/s"  # no such user here: the path as it is
