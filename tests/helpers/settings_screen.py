"""The settings screen's helpers: ``cfg`` (a fixture: the repo's config.toml copied to tmp_path, cwd
there; registered in tests/conftest.py), an app on it, its message line, moving to a key."""

from __future__ import annotations

import shutil

import pytest
from textual.widgets import Input, OptionList, Static

from backend.server.client import Poll
from backend.settings import load
from tests.helpers.console import PARSED, READY, ScriptedClient, wait_until
from tui.app import make_app
from tui.screens.settings import SettingsScreen

STOPPED = {"state": "stopped"}


@pytest.fixture
def cfg(tmp_path, qhome, monkeypatch, repo_config):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    path = work / "config.toml"
    shutil.copy(repo_config, path)
    return path


def make(cfg, state=STOPPED, overrides=(), demo=False):
    settings = load(config=str(cfg), demo=demo, overrides=list(overrides))
    client = ScriptedClient([Poll(state=state, parsed=PARSED if state is READY else {})])
    return make_app(settings, client), client


def message(app) -> str:
    return str(app.screen.query_one("#message", Static).render())


def editor(app) -> Input:
    return app.screen.query_one("#editor", Input)


async def open_at(pilot, app, dotted: str) -> None:
    """e, then → to the key's section and ↓ to the key."""
    await pilot.press("e")
    assert await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen))
    rows = app.screen.query_one(OptionList)
    assert rows.highlighted_option.id == "server.model"
    section = dotted.split(".")[0]
    while not rows.highlighted_option.id.startswith(section + "."):
        await pilot.press("right")
    target = rows.get_option_index(dotted)
    await pilot.press(*["down"] * (target - rows.highlighted))
    assert rows.highlighted_option is not None and rows.highlighted_option.id == dotted


async def edit(pilot, app, text: str) -> None:
    await pilot.press("enter")
    assert editor(app).display and app.screen.focused is editor(app)
    await pilot.press(*["backspace"] * len(editor(app).value), *text, "enter")
