"""docs/make_screenshot.py, which keeps the README's picture current, still makes one: the real
console at 120×40 on the recorded demo feed, READY with its figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def test_the_screenshot_script_draws_the_ready_console(tmp_path, qhome):
    spec = importlib.util.spec_from_file_location("make_screenshot", ROOT / "docs" / "make_screenshot.py")
    shot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shot)
    out = tmp_path / "console.svg"
    await shot.shoot(out, port=0)  # never 8011, where an end-to-end test's demo server may be starting
    svg = out.read_text(encoding="utf-8")
    assert svg.startswith("<svg")
    for shown in ("READY", "qwen-tui-demo", "1,309,184", "startup", "metrics", "ledger"):
        assert shown in svg.replace("&#160;", " "), shown
