"""The pull screen (g): it starts a real `qwen-tui pull` process against the fake hub mirror and follows
its state file: a bar per file and overall, then the verification and u (server.model = the folder);
a detached pull started elsewhere shows in a new console and c cancels it; a console-started pull
that is not detached ends when its console is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.widgets import Input, ProgressBar

from backend.server.client import Poll
from backend.settings import load
from tests.helpers.console import ScriptedClient, wait_until
from tests.helpers.hub_mirror import HubMirror, make_sharded_model
from tui.app import make_app
from tui.screens.pull import FileRow, PullScreen

REPO = "Qwen/Qwen2.5-Demo-Sharded"
from tests.helpers import ROOT  # noqa: E402


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return make_sharded_model(tmp_path_factory.mktemp("repo") / "repo", 3)


@pytest.fixture
def mirror(model_folder, monkeypatch):
    m = HubMirror()
    m.add(REPO, model_folder)
    m.start()
    monkeypatch.setenv("HF_ENDPOINT", m.url)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    yield m
    m.stop()


def _app(cfg: Path):
    return make_app(load(config=str(cfg), overrides=["console.on_exit=keep"]),
                    ScriptedClient([Poll(state={"state": "stopped"})]))


async def test_g_pulls_shows_progress_and_u_sets_server_model(mirror, model_folder, tmp_path, qhome):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'# mine\n[server]\nmodel = "{REPO}"  # a repo id\n')
    dest = tmp_path / "models" / "demo"
    app = _app(cfg)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("g")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PullScreen))
        screen = app.screen
        assert screen.query_one("#repo", Input).value == REPO  # offered from server.model
        assert "free in" in str(screen.query_one("#target").render())
        screen.query_one("#folder", Input).value = str(dest)
        screen.query_one("#folder", Input).focus()
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: (screen.state or {}).get("phase") == "done", tries=400)
        await pilot.pause(0.5)
        result = screen.state["result"]
        assert result["verified"] and result["local_dir"] == str(dest.resolve())
        assert len(screen.query(FileRow)) == len(list(model_folder.iterdir()))
        bar = screen.query_one("#overall-bar", ProgressBar)
        assert bar.progress == bar.total == sum(p.stat().st_size for p in model_folder.iterdir())
        assert "ETA" in str(screen.query_one("#overall-text").render())
        assert "use this folder for server.model" in str(screen.query_one("#result").render())
        await pilot.press("u")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, PullScreen))
        assert app.settings.server["model"] == str(dest.resolve())
    text = cfg.read_text()
    assert f'model = "{dest.resolve()}"  # a repo id' in text and "# mine" in text


async def test_a_detached_pull_shows_in_a_new_console_and_c_cancels_it(mirror, tmp_path, qhome):
    mirror.rate_bps = 100_000
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "backend.cli", "pull", "--detach", "--json", "--local-dir",
                        str(tmp_path / "d"), REPO], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    pid = json.loads(r.stdout)["pid"]
    cfg = tmp_path / "config.toml"
    cfg.write_text("[server]\nport = 8000\n")
    app = _app(cfg)
    notes = []
    async with app.run_test(size=(140, 45)) as pilot:
        app.notify = lambda msg, **kw: notes.append(msg)  # noqa: E731
        await pilot.press("g")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PullScreen))
        screen = app.screen
        assert await wait_until(pilot, lambda: screen.alive and screen.rows, tries=200)
        assert screen.state["pid"] == pid and screen.state["detached"]
        assert not screen.query_one("#form").display  # following the running pull, not asking
        await pilot.press("c")
        assert await wait_until(pilot, lambda: (screen.state or {}).get("phase") == "cancelled", tries=300)
        assert "pull again continues" in str(screen.query_one("#keys").render())


def test_a_console_pull_stops_when_its_console_is_gone(mirror, tmp_path, qhome):
    from backend.pull import state as pull_state
    from backend.pull.state import spawn
    from backend.spawn import PullJob, pull

    mirror.rate_bps = 100_000
    console = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pid, _ = spawn(pull(None, PullJob(REPO, local_dir=str(tmp_path / "c"), watch_parent=console.pid)))
    deadline = time.time() + 20
    while time.time() < deadline and not ((pull_state.read()[0] or {}).get("progress") or {}).get("done_bytes"):
        time.sleep(0.1)
    console.kill()
    console.wait()
    deadline = time.time() + 20
    while time.time() < deadline and (pull_state.read()[0] or {}).get("phase") != "cancelled":
        time.sleep(0.1)
    data = pull_state.read()[0]
    assert data["pid"] == pid and data["phase"] == "cancelled" and not data["detached"]


async def test_doctor_offers_g_for_a_repo_id_not_downloaded(tmp_path, qhome, monkeypatch):
    from backend import doctor
    from backend.doctor import Check
    from tui.screens.doctor import DoctorScreen

    monkeypatch.setattr(doctor, "run_checks", lambda settings, env=None: [
        Check("model", "warn", f"{REPO} is not downloaded", f"download it first: qwen-tui pull --set-model {REPO}")])
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[server]\nmodel = "{REPO}"\n')
    app = _app(cfg)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("d")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DoctorScreen))
        assert await wait_until(pilot, lambda: "g: get the model" in str(app.screen.query_one("#keys").render()))
        await pilot.press("g")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PullScreen))
        assert app.screen.query_one("#repo", Input).value == REPO


async def test_a_running_pull_is_said_at_start(qhome, tmp_path):
    """The pull check runs after the console's first frame (its imports are kept off the start):
    it still runs, and says so once."""
    from backend.pull import state as pull_state
    from backend.server import statefile

    fake = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "qwen-tui", "pull", REPO])
    try:
        deadline = time.time() + 10
        while time.time() < deadline and statefile.create_time(fake.pid) is None:
            time.sleep(0.05)
        statefile.ensure_private_dirs()
        statefile.write_json({"pid": fake.pid, "create_time": statefile.create_time(fake.pid), "repo_id": REPO,
                              "phase": "downloading", "detached": True}, pull_state.state_path())
        assert pull_state.running() is not None
        cfg = tmp_path / "config.toml"
        cfg.write_text("[server]\nport = 8000\n")
        app = _app(cfg)
        notes: list[str] = []
        real = app.notify
        app.notify = lambda msg, **kw: (notes.append(msg), real(msg, **kw))  # type: ignore[method-assign]
        async with app.run_test(size=(140, 45)) as pilot:
            assert await wait_until(pilot, lambda: any("a pull of" in n for n in notes), tries=200), notes
            said = [n for n in notes if "a pull of" in n]
            assert said == [f"a pull of {REPO} is running (pid {fake.pid}): g shows it"]
    finally:
        fake.kill()
        fake.wait()
