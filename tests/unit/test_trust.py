"""Trust nothing a state file says (issue 17, cases 1, 3, 4, 7): owner, mode, types, and a live
qwen-tui supervisor by its command line, before anything is signalled, read or counted as owned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from backend.cli import main
from backend.server import client as supervisor_client
from backend.server import orphans, statefile
from tests.helpers import ROOT
from tests.helpers.console import NoNvml
from tests.helpers.procs import VLLM_LIKE, alive


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=os.environ.copy())


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"])


def _name(pid: int, **extra) -> dict:
    p = psutil.Process(pid)
    data = {"state": "ready", "supervisor_pid": pid, "supervisor_create_time": p.create_time(),
            "supervisor_cmdline": " ".join(p.cmdline()), **extra}
    statefile.write(data)
    return data


@pytest.mark.parametrize("state", ["ready", "stopped"])
def test_stop_never_signals_a_process_that_is_not_a_supervisor(qhome, state):
    sleeper = _sleeper()
    try:
        _name(sleeper.pid, state=state)  # pid, start time and command line all match
        ok, msg = supervisor_client.stop(timeout=2)
        time.sleep(0.2)
        assert sleeper.poll() is None, "the sleep got a signal"
        assert supervisor_client.status()["state"] != "ready"
        r = _cli("stop")
        time.sleep(0.2)
        assert sleeper.poll() is None and "Traceback" not in r.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    assert state == "stopped" or "not a qwen-tui supervisor" in msg


def test_the_calling_shell_and_pid_1_are_never_trusted(qhome):
    for pid in (os.getppid(), 1):
        _name(pid)
        data, why = statefile.read_live(cleanup=False)
        assert data is None and "untrusted state file" in why


def test_a_live_supervisor_is_trusted(qhome, fake_supervisor):
    fake_supervisor()
    data, why = statefile.read_live(cleanup=False)
    assert data is not None and why is None


def test_a_file_others_can_write_is_not_trusted(qhome, fake_supervisor):
    fake_supervisor()
    os.chmod(statefile.state_path(), 0o666)
    data, why = statefile.read_live(cleanup=False)
    assert data is None and "writable by others (mode 0666)" in why
    assert fake_supervisor.proc.poll() is None
    supervisor_client.stop(timeout=1)
    assert fake_supervisor.proc.poll() is None  # never signalled


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_file_another_user_owns_is_not_trusted_even_by_root(qhome, fake_supervisor):
    fake_supervisor()
    os.chown(statefile.state_path(), 65534, 65534)
    data, why = statefile.read_live(cleanup=False)
    assert data is None and "owned by uid 65534" in why
    supervisor_client.stop(timeout=1)
    assert fake_supervisor.proc.poll() is None


def test_the_supervisor_writes_its_state_user_only(qhome):
    statefile.logs_dir().mkdir(parents=True, mode=0o755)
    statefile.write({"state": "stopped"})
    assert statefile.state_path().stat().st_mode & 0o777 == 0o600
    assert statefile.logs_dir().stat().st_mode & 0o777 == 0o700  # logs may hold prompts


def test_logs_reads_only_files_under_the_state_dir(qhome, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not print me\n")
    statefile.logs_dir().mkdir(parents=True)
    for named in (str(secret), "/etc/passwd", str(statefile.logs_dir() / ".." / ".." / ".." / "secret.txt")):
        statefile.write({"state": "stopped", "log_path": named})
        r = _cli("logs")
        assert r.returncode == 1 and "do not print me" not in r.stdout and "root:" not in r.stdout
        assert "not a log under" in r.stderr
    link = statefile.logs_dir() / "vllm-link.log"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(secret)
    statefile.write({"state": "stopped", "log_path": str(link)})
    assert "do not print me" not in _cli("logs").stdout
    follower = supervisor_client.LogFollower()
    assert follower.poll(str(secret)) == ([], False) and follower.path is None


def test_a_state_file_naming_pid_1_does_not_hide_orphans(qhome, spawn):
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    for fields in ({"supervisor_pid": 1}, {"pid": 1, "pgid": 1}):
        one = psutil.Process(1)
        statefile.write({"state": "ready", "supervisor_pid": 1, "supervisor_create_time": one.create_time(),
                         "supervisor_cmdline": " ".join(one.cmdline()), **fields})
        found = orphans.scan({}, monitor=NoNvml())
        assert tree.pids["engine"] in found.pids and tree.pids["api"] in found.pids


def test_a_live_supervisor_naming_pid_1_as_its_server_owns_only_its_own(qhome, spawn, fake_supervisor):
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    fake_supervisor(pid=tree.pids["api"], pgid=1)  # a type error: pgid 1 is no server's group
    assert statefile.read_live(cleanup=False)[0] is None
    fake_supervisor(pid=tree.pids["api"], pgid=tree.pgid)
    assert not set(orphans.scan({}, monitor=NoNvml()).pids) & set(tree.pids.values())


BAD = [{"supervisor_pid": "abc"}, {"supervisor_pid": [1]}, {"supervisor_pid": 1.5},
       {"supervisor_pid": True}, {"started_at": "yesterday"}, {"started_at": float("inf")},
       {"state": 7}, {"state": "dancing"}, {"restarts": "x"}, {"log_path": ["/etc/shadow"]},
       {"settings": {"console": {"stop_timeout": "soon"}}}, {"pgid": -5}, {"reaping_pids": ["x"]}]


@pytest.mark.parametrize("bad", BAD, ids=[json.dumps(b)[:40] for b in BAD])
def test_wrong_types_are_an_untrusted_state_file_never_a_traceback(qhome, bad, fake_supervisor, capsys):
    data = {"state": "ready", "supervisor_pid": fake_supervisor.proc.pid,
            "supervisor_create_time": psutil.Process(fake_supervisor.proc.pid).create_time(), **bad}
    path = statefile.state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data).replace("Infinity", "1e999"))
    path.chmod(0o600)
    for args in (["status"], ["status", "--json"], ["stop", "--json"], ["logs"]):
        main(args)  # a traceback would raise here
    capsys.readouterr()
    main(["status", "--json"])
    st = json.loads(capsys.readouterr().out)
    if "settings" not in bad:
        assert st["state"] == "stopped" and "untrusted state file" in st["note"]
        assert fake_supervisor.proc.poll() is None  # never signalled
    # serve sets the file aside and goes on (to "vLLM is not installed" here)
    assert main(["--set", "console.vllm_python=/nonexistent/python", "serve"]) == 2
    assert "vLLM is not installed" in capsys.readouterr().err


def test_after_the_supervisor_is_killed_status_says_so_and_lists_what_it_left(qhome, spawn, fake_supervisor):
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    api = tree.pids["api"]
    fake_supervisor(pid=api, pgid=tree.pgid, pid_create_time=psutil.Process(api).create_time(),
                    log_path=None)
    assert supervisor_client.status()["state"] == "ready"
    fake_supervisor.proc.send_signal(signal.SIGKILL)
    fake_supervisor.proc.wait()
    st = supervisor_client.status()
    assert st["state"] == "failed" and st["failure"]["kind"] == "supervisor_died"
    assert {api, tree.pids["engine"], tree.pids["tp0"]} <= {p["pid"] for p in st["left"]}
    assert "stop --orphans" in st["failure"]["fix"]
    ok, msg = supervisor_client.stop(timeout=1)
    assert not ok and f"pid {api}" in msg and "died" in msg
    assert alive(api)  # listed, not guessed at
    r = _cli("status")
    assert r.returncode == 1 and "died" in r.stdout


def test_pids_a_live_supervisor_is_still_reaping_count_as_owned(qhome, spawn, fake_supervisor):
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    left = [tree.pids["engine"], tree.pids["tp0"], tree.pids["tp1"]]  # what a killed API server left
    fake_supervisor(state="failed", reaping_pids=left)
    found = orphans.scan({}, monitor=NoNvml())
    assert not set(found.pids) & set(left) and tree.pids["api"] in found.pids


def test_a_killed_supervisor_nobody_reaped_yet_counts_as_dead(qhome, fake_supervisor):
    """A supervisor whose parent died is reaped by init, if ever: a zombie is not a live one."""
    fake_supervisor()
    fake_supervisor.proc.send_signal(signal.SIGKILL)  # not waited for: a zombie
    for _ in range(100):
        if psutil.Process(fake_supervisor.proc.pid).status() == psutil.STATUS_ZOMBIE:
            break
        time.sleep(0.02)
    st = supervisor_client.status()
    assert st["state"] == "failed" and st["failure"]["kind"] == "supervisor_died"
    ok, msg = supervisor_client.stop(timeout=1)
    assert "died" in msg
