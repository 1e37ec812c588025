import os
import time
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def qhome(tmp_path, monkeypatch):
    """Isolated XDG dirs (config, cache, state) for one test."""
    monkeypatch.setenv("QWEN_TUI_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("QWEN_TUI_CONFIG", raising=False)
    return tmp_path / "home"


@pytest.fixture
def repo_config():
    return ROOT / "config.toml"


@pytest.fixture(scope="session")
def vllm_lock():
    """Serialise everything that starts a real vLLM server on this machine (tests, benchmarks,
    other checkouts): they share port 8011 and assert that no stray vLLM process runs.
    From a shell: ``flock /tmp/qwen-tui-vllm.lock <command>``."""
    import fcntl

    with open("/tmp/qwen-tui-vllm.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


FAKE_SUPERVISOR = "import time\nwhile True:\n    time.sleep(1)\n"


def start_fake_supervisor(tmp_path, home=None, **popen_kw):
    """A process whose command line is a supervisor's (`python -m backend.cli serve --quiet`) but
    that only sleeps: a package `backend.cli` of its own, first on its path. ``home``: its
    QWEN_TUI_HOME (another state dir). Returns (proc, write): `write(path=None, **state)` writes a
    state file naming it (pid, start time, command line)."""
    import subprocess

    import psutil

    from backend import statefile

    pkg = tmp_path / f"fake-supervisor-{len(list(tmp_path.glob('fake-supervisor-*')))}"
    (pkg / "backend" / "cli").mkdir(parents=True)
    (pkg / "backend" / "__init__.py").write_text("")
    (pkg / "backend" / "cli" / "__init__.py").write_text("")
    (pkg / "backend" / "cli" / "__main__.py").write_text(FAKE_SUPERVISOR)
    env = dict(os.environ, PYTHONPATH=str(pkg))
    if home is not None:
        env["QWEN_TUI_HOME"] = str(home)
    proc = subprocess.Popen([sys.executable, "-m", "backend.cli", "serve", "--quiet"], cwd=pkg, env=env,
                            **popen_kw)
    deadline = time.time() + 10
    while "serve" not in psutil.Process(proc.pid).cmdline() and time.time() < deadline:
        time.sleep(0.02)
    me = psutil.Process(proc.pid)

    def write(path=None, **state):
        data = {"state": "ready", "supervisor_pid": proc.pid, "supervisor_create_time": me.create_time(),
                "supervisor_cmdline": " ".join(me.cmdline()), **state}
        statefile.write(data, path)
        return data

    write.proc = proc
    return proc, write


@pytest.fixture
def fake_supervisor(tmp_path):
    """A fake supervisor under this test's state dir (see start_fake_supervisor)."""
    proc, write = start_fake_supervisor(tmp_path)
    yield write
    proc.kill()
    proc.wait()


@pytest.fixture
def in_process_supervisor(monkeypatch):
    """For tests whose Supervisor runs inside this pytest process against a FAKE HTTP server that
    the test itself runs (so it is not in the launched process tree): the state file's trust takes
    this process for a supervisor, and READY does not ask who holds the port. Real supervisors get
    neither exemption (tests/test_trust.py, tests/test_ready_owner.py)."""
    from backend import statefile
    from backend.supervisor import Supervisor

    real = statefile.is_supervisor
    monkeypatch.setattr(statefile, "is_supervisor", lambda pid: pid == os.getpid() or real(pid))
    monkeypatch.setattr(Supervisor, "_foreign_listener", lambda self: None)
