"""End to end on the real vLLM CPU demo server: a setting edited from `e` in --demo goes to the demo
settings file (not the user's config), `r` restarts the demo, and the running server's argv has the
new value (read from /proc, not from what the console believes). Then a chat on that server: the demo
model's replies are whole printable words (its word-level tokenizer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.e2e import START_TIMEOUT, cli, demo_server, pilot_waiter, status

pytestmark = pytest.mark.e2e


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


async def test_a_demo_setting_edited_from_e_reaches_the_server_after_r(tmp_path, vllm_lock, monkeypatch):
    from backend import demo
    from backend.server.client import ServerClient
    from backend.settings import load
    from backend.spawn import Origin
    from tests.helpers.settings_screen import edit, message, open_at
    from tui.app import make_app
    from tui.screens.main import MainScreen
    from tui.widgets.status_bar import StatusBar

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # no ./config.toml: the user's file is the XDG one, which stays untouched
    with demo_server(tmp_path / "home") as st:
        old_pid = st["pid"]
        assert "--max-num-seqs" in _cmdline(old_pid) and "6" not in _cmdline(old_pid)
        app = make_app(load(demo=True, overrides=["console.on_exit=keep"]), ServerClient(Origin(demo=True)))
        async with app.run_test(size=(150, 45)) as pilot:
            until = pilot_waiter(pilot, 10)
            bar = app.screen.query_one(StatusBar)
            assert await until(lambda: "READY" in bar.last_text, 30), bar.last_text
            await open_at(pilot, app, "server.max_num_seqs")
            await edit(pilot, app, "6")
            assert await until(lambda: "Press r" in message(app)), message(app)
            assert "demo settings file" in message(app)
            await pilot.press("r")
            assert await until(lambda: isinstance(app.screen, MainScreen))
            assert await until(lambda: status().get("pid") not in (None, old_pid), 120), status()
            assert await until(lambda: "READY" in bar.last_text and status().get("state") == "ready",
                               START_TIMEOUT), bar.last_text
            argv = _cmdline(status()["pid"])
            assert argv[argv.index("--max-num-seqs") + 1] == "6", argv
            app.exit()
        # the same server: the demo's random model replies in whole printable words (its tokenizer), and the
        # text-mode chat writes no control byte
        r = cli("--demo", "chat", "--max-tokens", "48", "say something", timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() and "\ufffd" not in r.stdout, r.stdout
        assert all(c.isprintable() or c in "\n\t" for c in r.stdout), repr(r.stdout)
        assert len(r.stdout.split()) >= 5, repr(r.stdout)  # word salad: words, not bytes
        assert "max_num_seqs = 6" in demo.settings_path().read_text()
