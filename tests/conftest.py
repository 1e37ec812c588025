import os
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
