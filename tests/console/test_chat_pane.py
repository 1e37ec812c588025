"""Pilot tests of the chat tab without a server: the error is explained, nothing is kept.
The streaming path runs against real vLLM in test_e2e.py."""

from __future__ import annotations

from textual.widgets import Input, Static

from backend.server.client import Poll
from tests.helpers.console import app_with, closed_port, wait_until
from tui.widgets.chat_pane import ChatPane


async def test_c_opens_the_chat_and_a_dead_server_is_explained(qhome):
    app, _ = app_with([Poll(state={"state": "stopped"})], qhome, f"server.port={closed_port()}")
    async with app.run_test(size=(150, 45)) as pilot:
        await pilot.press("c")
        assert app.screen.view == "chat"
        box = app.screen.query_one("#chat-input", Input)
        assert box.has_focus
        await pilot.press(*"hello", "enter")
        pane = app.screen.query_one(ChatPane)
        errors = lambda: [str(w.render()) for w in pane.query(".error").results(Static)]  # noqa: E731
        assert await wait_until(pilot, lambda: errors())
        assert "cannot connect" in errors()[0] and "fix: start the server" in errors()[0]
        assert pane.conversation.turns == [] and not pane.streaming
        assert app.screen.measured_tps is None
        await pilot.press("escape")  # stays in the chat: the input keeps the keys
        assert box.has_focus and app.screen.view == "chat"
        await pilot.press("escape")  # a second esc goes back to the log
        assert app.screen.view == "log"


async def test_a_running_server_is_asked_at_its_own_address_not_the_edited_one(qhome):
    """Settings saved while a server runs apply on restart: chat and status bar follow the server."""
    port = closed_port()
    state = {"state": "ready", "base_url": f"http://127.0.0.1:{port}", "served_model_name": "running-name"}
    app, _ = app_with([Poll(state=state)], qhome, "server.port=9")
    async with app.run_test(size=(150, 45)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.chat_endpoint is not None)
        await pilot.press("c", *"hi", "enter")
        pane = app.screen.query_one(ChatPane)
        assert pane.endpoint == (f"http://127.0.0.1:{port}", "running-name")
        errors = lambda: [str(w.render()) for w in pane.query(".error").results(Static)]  # noqa: E731
        assert await wait_until(pilot, lambda: errors())
        assert f"127.0.0.1:{port}" in errors()[0]  # not :9 from the edited settings
        from tui.widgets.status_bar import StatusBar
        assert f":{port}" in app.screen.query_one(StatusBar).last_text


async def test_metrics_panel_says_why_when_a_ready_server_has_no_metrics(qhome):
    from tui.widgets.metrics_panel import MetricsPanel

    port = closed_port()
    state = {"state": "ready", "base_url": f"http://127.0.0.1:{port}", "served_model_name": "m"}
    app, _ = app_with([Poll(state=state)], qhome, "console.metrics_interval_s=0.1")
    async with app.run_test(size=(150, 45)) as pilot:
        panel = app.screen.query_one(MetricsPanel)
        assert await wait_until(pilot, lambda: "cannot read" in str(panel.render()))
        assert f"127.0.0.1:{port}/metrics" in str(panel.render())


async def test_the_chat_is_built_when_first_shown_and_takes_keys_at_once(qhome):
    """Start-up (issues 16, 28): the chat pane is not there before it is first shown; shown by a
    click on its tab, the very next letter is text in its input, not a command (s: start)."""
    app, client = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(150, 45)) as pilot:
        assert not app.screen.query(ChatPane) and not app.screen.query("#chat-input")
        await pilot.click("#views", offset=(1 + len(" Log ") + 2 + 1, 0))  # padding, " Log ", the gap: "C"
        await pilot.press("s")
        pane = app.screen.query_one(ChatPane)
        assert pane.built and app.screen.view == "chat"
        box = app.screen.query_one("#chat-input", Input)
        assert box.value == "s" and box.has_focus
        await pilot.pause(0.1)
    assert client.actions == []


def log_shown(app) -> bool:
    """The log view: the log, or while there is none and nothing runs, the hint in its place."""
    return bool(app.screen.query_one("#log").display or app.screen.query_one("#log-hint").display)


async def test_a_click_between_the_views_names_changes_nothing_and_one_on_log_goes_back(qhome):
    """The bar above the log: a click on "Chat" shows the chat, one on "Log" the log again; the
    gap between the two names is neither."""
    app, _client = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.click("#views", offset=(1 + len(" Log ") + 1, 0))  # in the gap
        await pilot.pause()
        assert app.screen.view == "log" and log_shown(app)
        await pilot.click("#views", offset=(1 + len(" Log ") + 2 + 2, 0))
        await pilot.pause()
        assert app.screen.view == "chat" and app.screen.query_one("#chat").display
        assert not log_shown(app) and app.screen.query_one("#chat-input").has_focus
        await pilot.click("#views", offset=(2, 0))
        await pilot.pause()
        assert app.screen.view == "log" and log_shown(app)
        assert not app.screen.query_one("#chat").display


async def test_the_ledgers_ceiling_reaches_the_chat_made_after_it_and_follows_it(qhome):
    """The chat pane is made on first showing (issue 28): the batch-1 ceiling the plan gave before
    then is its ceiling, and a later plan's replaces it."""
    from tui.messages import PlanReady

    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(150, 45)) as pilot:
        screen = app.screen
        assert await wait_until(pilot, lambda: screen.plan is not None or screen.plan_error is not None)
        screen.post_message(PlanReady({"decode_tokens_per_s_ceiling": 64.0}, None))  # after its own
        assert await wait_until(pilot, lambda: screen.chat_ceiling == 64.0)
        assert not screen.query(ChatPane)
        await pilot.press("c")
        pane = screen.query_one(ChatPane)
        assert pane.ceiling == 64.0
        screen.post_message(PlanReady({"decode_tokens_per_s_ceiling": 50.5}, None))
        assert await wait_until(pilot, lambda: pane.ceiling == 50.5)
