"""A worker that raises is named on screen, not left to freeze its panel in silence: whoever started
it (the app, a screen, a widget), the app's worker manager hands its failure to one handler
(tui/worker_errors.py), so no class has to remember a mixin. Asserted on the toast the user sees."""

from __future__ import annotations

from textual.widgets._toast import Toast

from backend.server.client import Poll
from backend.settings import load
from tests.helpers.console import NoNvml, ScriptedClient, app_with, wait_until
from tui.app import make_app


class BrokenGpus(NoNvml):
    """NVML that initialised, then fails on the first sample (a GPU fell off the bus)."""

    reason = None

    def available(self) -> bool:
        return True

    def sample(self):
        raise RuntimeError("NVML: GPU is lost")


def _toasts(app) -> list[str]:
    """The notifications on screen now, as drawn."""
    return [str(t.render()) for t in app.screen.query(Toast)]


async def test_the_gpu_sampler_raising_says_which_worker_failed(qhome):
    app = make_app(load(overrides=["console.on_exit=ask"]), ScriptedClient([Poll(state={"state": "stopped"})]),
                   BrokenGpus())
    async with app.run_test(size=(140, 40), notifications=True) as pilot:
        assert await wait_until(pilot, lambda: app.worker_failures)
        assert [f[:2] for f in app.worker_failures] == [("sample_gpus", "gpus")]  # said once
        said = "the GPU sampler (sample_gpus) stopped: RuntimeError: NVML: GPU is lost"
        assert await wait_until(pilot, lambda: any(said in t for t in _toasts(app))), _toasts(app)
        assert app.is_running  # the console goes on: the other workers still poll
        assert app.screen.state.state == "stopped"


class BrokenStore:
    """A conversation store whose listing fails with what ConversationsScreen does not expect."""

    root = "/nowhere"

    def list(self):
        raise ValueError("index is corrupt")


async def test_a_modal_screens_worker_raising_reaches_the_one_handler(qhome):
    """ConversationsScreen has no hand-off of its own (it catches OSError only)."""
    from tui.screens.conversations import ConversationsScreen

    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await app.push_screen(ConversationsScreen(BrokenStore()))
        assert await wait_until(pilot, lambda: app.worker_failures)
        assert [f[:2] for f in app.worker_failures] == [("reload", "conversations")]
        said = "the conversation list (reload) stopped: ValueError: index is corrupt"
        assert await wait_until(pilot, lambda: any(said in t for t in _toasts(app))), _toasts(app)
        assert isinstance(app.screen, ConversationsScreen)  # still open: esc closes it as ever


async def test_a_widgets_worker_raising_reaches_the_one_handler(qhome, monkeypatch):
    """A reply segment's Markdown render (a widget's worker, widgets/reply.py)."""
    from tui.widgets import reply

    async def broken(*_a, **_k):
        raise RuntimeError("markdown-it choked")

    monkeypatch.setattr(reply, "render_markdown", broken)
    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await app.screen.mount(reply.MarkdownSegment("# a title\n\nsome text"))
        assert await wait_until(pilot, lambda: app.worker_failures)
        assert {f[:2] for f in app.worker_failures} == {("_render_at", "render")}
        said = "a reply's render (_render_at) stopped: RuntimeError: markdown-it choked"
        assert await wait_until(pilot, lambda: any(said in t for t in _toasts(app))), _toasts(app)
