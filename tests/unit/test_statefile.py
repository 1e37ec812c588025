"""The state file is never trusted blindly: a dead or reused supervisor pid makes it stale."""

import subprocess
import sys

from backend.logparse import is_permanent
from backend.server import client as supervisor_client
from backend.server import statefile
from backend.server.supervisor import backoff_delay


def test_live_supervisor_is_trusted(qhome, fake_supervisor):
    fake_supervisor()
    data, why = statefile.read_live()
    assert data["state"] == "ready" and why is None


def test_dead_pid_is_stale_and_moved_aside(qhome):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    statefile.write({"state": "ready", "supervisor_pid": p.pid, "supervisor_create_time": 1.0, "pid": p.pid})
    data, why = statefile.read_live()
    assert data is None and "is gone" in why
    assert not statefile.state_path().exists()
    assert statefile.state_path().with_suffix(".json.stale").exists()
    assert supervisor_client.status()["state"] == "stopped"


def test_reused_pid_is_not_trusted(qhome, fake_supervisor):
    me = fake_supervisor.proc.pid  # alive, but started at another time than the file says
    statefile.write({"state": "ready", "supervisor_pid": me,
                     "supervisor_create_time": statefile.create_time(me) - 1000})
    data, why = statefile.read_live(cleanup=False)
    assert data is None and "another process" in why
    st = supervisor_client.status()  # its supervisor is gone without saying so: it died
    assert st["state"] == "failed" and st["pid"] is None and st["failure"]["kind"] == "supervisor_died"


def test_same_pid_and_start_time_running_another_program_is_not_trusted(qhome, fake_supervisor):
    me = fake_supervisor.proc.pid  # what exec() leaves: the pid and start time match, the command line does not
    statefile.write({"state": "ready", "supervisor_pid": me, "supervisor_create_time": statefile.create_time(me),
                     "supervisor_cmdline": "python -m backend.cli serve"})
    data, why = statefile.read_live(cleanup=False)
    assert data is None and "another process" in why
    statefile.write({"state": "ready", "supervisor_pid": me, "supervisor_create_time": statefile.create_time(me),
                     "supervisor_cmdline": statefile.cmdline(me)})
    assert statefile.read_live(cleanup=False)[0] is not None


def test_finished_failure_is_history_not_stale(qhome):
    statefile.write({"state": "failed", "supervisor_pid": 999999, "supervisor_create_time": 1.0,
                     "failure": {"kind": "bad_argument", "message": "m", "fix": "f"}, "restarts": 0})
    data, why = statefile.read_live()
    assert data is None and why is None
    st = supervisor_client.status()
    assert st["state"] == "failed" and st["failure"]["kind"] == "bad_argument"


def test_garbage_state_file_is_not_trusted(qhome):
    statefile.state_path().parent.mkdir(parents=True, exist_ok=True)
    statefile.state_path().write_text("{not json")
    assert supervisor_client.status()["state"] == "stopped"


def test_backoff_doubles_and_caps():
    assert [backoff_delay(n) for n in (1, 2, 3, 4)] == [5, 10, 20, 40]
    assert backoff_delay(20) == 300


def test_failures_that_would_repeat_are_not_restarted():
    for kind in ("bad_argument", "kv_cache_too_small", "no_cache_memory", "oom_loading", "missing_cuda_library"):
        assert is_permanent(kind) and is_permanent(kind, was_ready=True)
    assert is_permanent("oom_runtime") and not is_permanent("oom_runtime", was_ready=True)  # at start-up only
    # these can clear by themselves (an old server still exiting): one more try, see test_supervisor_attempts
    for kind in ("engine_dead", "unknown", "port_in_use", "memory_in_use"):
        assert not is_permanent(kind)
