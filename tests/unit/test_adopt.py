"""Issue 26: after kill -9 of a supervisor whose server lives, the server is proved this state
dir's and adopted (a new supervisor watches and stops it, the log keeps appending), or reported
as orphaned; status never says stopped while it runs; a refused serve never moves the file aside."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from backend.server import adopt, statefile
from backend.server import client as supervisor_client
from backend.server.launch import Launch, VllmInstall
from backend.server.supervisor import Supervisor
from backend.settings import load
from backend.spawn import Origin
from tests.helpers.procs import alive
from tests.helpers.supervisor import STAND_IN, until

RUN = """
import asyncio, sys
from backend.server.launch import Launch, VllmInstall
from backend.spawn import Origin
from backend.settings import load
from backend.server.supervisor import Supervisor
from tests.helpers.supervisor import STAND_IN
settings = load(None, overrides=["console.stop_timeout=5", "server.port=1"])
launch = Launch([sys.executable, "-c", STAND_IN], {}, VllmInstall(None, None, sys.executable), [])
asyncio.run(Supervisor(settings, launch, restart="never").run())
"""


def _wait(pred, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.fixture
def dead_supervisor(qhome):
    """A real Supervisor (in a child process) that launched a stand-in server, then got SIGKILL:
    its state file names the server, which still runs."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen([sys.executable, "-c", RUN], cwd=root, env=dict(os.environ, PYTHONPATH=root),
                            start_new_session=True)
    _wait(lambda: (statefile.read() or {}).get("state") == "starting" and (statefile.read() or {}).get("pid"))
    data = statefile.read()
    _wait(lambda: len(statefile.leftovers(data)) >= 2)  # the API stand-in and its EngineCore child
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    yield data
    for pid in statefile.leftovers(data):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_status_says_orphaned_never_stopped_and_proves_it_ours(dead_supervisor):
    data = dead_supervisor
    st = supervisor_client.status()
    assert st.state == "failed" and st.failure["kind"] == "supervisor_died"
    assert st.detail.startswith(f"orphaned: running without a supervisor (pid {data['pid']}, port 1)")
    assert st.failure["orphaned"]["ok"] and "adopts it" in st.failure["fix"], st.failure["orphaned"]["failed"]
    proof = adopt.prove(data)
    assert proof.ok and any("launch line" in f for f in proof.facts), proof.failed
    assert statefile.state_path().exists()  # nothing moved aside


def test_a_server_that_does_not_match_is_orphaned_not_adopted(dead_supervisor):
    data = dict(dead_supervisor, argv=["vllm", "serve", "other-model"])
    proof = adopt.prove(data)
    assert not proof.ok and "its command line is not the recorded argv" in proof.failed
    assert f"stop --orphans --pid {data['pid']}" in proof.fix()


def test_serve_refuses_without_a_proof_and_keeps_the_state_file(dead_supervisor, capsys):
    from backend.cli import commands

    statefile.write(dict(dead_supervisor, argv=["vllm", "serve", "other-model"]))
    adopting, rc = commands._adoption()
    err = capsys.readouterr().err
    assert adopting is None and rc == 1 and "orphaned: running without a supervisor" in err
    assert statefile.state_path().exists() and not statefile.state_path().with_suffix(".json.stale").exists()


def test_stop_stops_a_proved_orphaned_server_and_leaves_nothing(dead_supervisor):
    left = statefile.leftovers(dead_supervisor)
    ok, msg = supervisor_client.stop()
    assert ok and "stopped the server its dead supervisor left" in msg, msg
    assert not any(alive(p) for p in left)
    assert supervisor_client.status().state == "stopped"


async def test_a_new_supervisor_adopts_watches_and_stops_it(dead_supervisor):
    data = dead_supervisor
    left = statefile.leftovers(data)
    settings = load(None, overrides=["console.stop_timeout=5", "server.port=1"])
    launch = Launch([sys.executable, "-c", STAND_IN], {}, VllmInstall(None, None, sys.executable), [])
    sup = Supervisor(settings, launch, restart="never", adopt=statefile.read())
    run = asyncio.create_task(sup.run())
    await until(lambda: sup.state == "starting" and "adopted pid" in sup.detail)
    now = statefile.read()  # (status() trusts only a `qwen-tui serve` command line: this test is none)
    assert now["pid"] == data["pid"] and now["supervisor_pid"] == os.getpid() and now["argv"] == data["argv"]
    with open(data["log_path"], encoding="utf-8") as f:
        log = f.read()
    assert f"adopted pid {data['pid']}" in log and log.startswith("qwen-tui: launch at")  # the same log, appended
    sup.request_stop()
    assert await asyncio.wait_for(run, 30) == 0
    assert sup.state == "stopped" and not any(alive(p) for p in left)


def test_a_restart_whose_new_server_fails_starts_the_old_settings_again(qhome, monkeypatch):
    """Issue 26: a restart that cannot start the new one restores the old one and says why."""
    old = {"state": "ready", "argv": ["vllm", "serve", "m"], "supervisor_pid": 4000, "supervisor_create_time": 1.0,
           "settings": {"server": {"model": "m", "max_model_len": 8192, "api_key": "<hidden>", "port": 8000,
                                   "env": {"OMP_NUM_THREADS": "2"}, "quantization": None}}}
    statefile.write(old)
    started = []
    monkeypatch.setattr(supervisor_client, "stop", lambda timeout=None: (True, "stopped in 1.0 s"))
    monkeypatch.setattr(supervisor_client, "wait_started", lambda t: "kv_cache_too_small: 32768 > 12784 tokens")
    monkeypatch.setattr(supervisor_client, "start_detached", lambda argv, **kw: started.append(argv) or
                        {"supervisor_pid": 4242, "base_url": "http://127.0.0.1:8000"})
    client = supervisor_client.ServerClient(Origin(overrides=("server.max_model_len=32768",)))
    monkeypatch.setattr(client, "start", lambda allow_orphans=False: "started")
    ok, text = client.restart_keeping()
    assert not ok and "the new settings did not start (kv_cache_too_small: 32768 > 12784 tokens)" in text
    assert "the old server is back (supervisor pid 4242" in text
    [origin] = started
    argv = origin.argv()
    assert argv[:2] == ["--set", "server.max_model_len=32768"]  # the console's own, then the old ones win
    assert "server.max_model_len=8192" in argv and "server.env.OMP_NUM_THREADS=2" in argv
    assert not any("api_key" in a or "quantization" in a for a in argv)
