"""Fixtures for every tier (tests/unit, tests/console, tests/e2e). Helpers live in tests/helpers/;
the fixtures several modules use are defined there and registered here as plugins."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `import backend`, `import tui`, `import tests.helpers` from any tier

from tests.helpers import FIXTURES  # noqa: E402  (needs ROOT on sys.path first)
from tests.helpers.fake_supervisor import start_fake_supervisor  # noqa: E402

__all__ = ["FIXTURES", "ROOT"]

# spawn (vLLM-like process trees), cfg (the settings screen's config copy), env (doctor's Env)
pytest_plugins = ["tests.helpers.procs", "tests.helpers.settings_screen", "tests.helpers.doctor"]


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
    from backend.server import health, statefile

    real = statefile.is_supervisor
    monkeypatch.setattr(statefile, "is_supervisor", lambda pid: pid == os.getpid() or real(pid))
    monkeypatch.setattr(health, "foreign_listener", lambda sup: None)
