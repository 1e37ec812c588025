"""Issue 28's newcomer pass at 80×24: the pull dialog's field has focus as it opens (letters are text,
enter submits), and the screens named there show their keys line whole."""

from __future__ import annotations

from textual.widgets import Input

from backend.supervisor_client import Poll
from tests.helpers.console import PARSED, READY, app_with, wait_until
from tui.screens.pull import PullScreen


async def test_g_opens_with_the_repo_field_focused_and_letters_are_text(qhome):
    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome, "server.model=/models/local")
    notes: list[str] = []
    async with app.run_test(size=(80, 24)) as pilot:
        real = app.notify
        app.notify = lambda msg, **kw: (notes.append(msg), real(msg, **kw))  # type: ignore[method-assign]
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        await pilot.press("g")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PullScreen))
        repo = app.screen.query_one("#repo", Input)
        assert await wait_until(pilot, lambda: repo.has_focus)
        await pilot.press(*"uck")  # the dialog's own keys (u, c, k) would fire without a focused field
        assert repo.value == "uck"
        assert not [n for n in notes if "pull" in n], notes
        await pilot.press("enter")  # submits: the repo id is checked and its fault said
        assert await wait_until(pilot, lambda: bool(notes))
        assert isinstance(app.screen, PullScreen) and "pull" not in notes[-1]
