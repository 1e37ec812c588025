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
