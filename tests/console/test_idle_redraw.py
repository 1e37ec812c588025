"""An idle console does not redraw: polls that bring nothing new leave the panels alone.
Fed by the SCRIPTED client of test_tui (no server)."""

from __future__ import annotations

import pytest

from backend.server.client import Poll
from tests.helpers.console import app_with
from tui.widgets.figure_strip import FigureStrip
from tui.widgets.figures_panel import FiguresPanel
from tui.widgets.ledger_panel import LedgerPanel
from tui.widgets.status_bar import StatusBar


@pytest.mark.parametrize("size", [(150, 45), (80, 24)])
async def test_unchanged_polls_redraw_nothing(qhome, size):
    """Each poll (5 a second) set the ledger's subtitle and rebuilt the status bar and figures:
    every one redrew (the ledger alone ~10 ms), about 5 % of a core for a console doing nothing."""
    app, _ = app_with([Poll(state={"state": "stopped"})], qhome, "console.metrics_interval_s=0.05")
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.5)
        counts = {}
        narrow = size[0] < 100
        if not narrow:
            assert not app.screen.query(FigureStrip)  # made once the screen is narrow (issue 28)
        for cls in (LedgerPanel, StatusBar, FiguresPanel) + ((FigureStrip,) if narrow else ()):
            widget = app.screen.query_one(cls)
            real = widget.refresh
            counts[cls.__name__] = 0

            def counting(*a, _real=real, _name=cls.__name__, **kw):
                counts[_name] += 1
                return _real(*a, **kw)

            widget.refresh = counting
        layouts = []
        real_layout = app.screen._refresh_layout
        app.screen._refresh_layout = lambda *a, **kw: (layouts.append(1), real_layout(*a, **kw))[1]
        await pilot.pause(1.2)  # about six polls
        # the strip (hidden at this width) updated each poll: a layout of the whole screen, and the
        # log's scrollbars redrawn, 5 times a second (~6 % of a core with a long log)
        assert set(counts.values()) == {0}, counts
        assert not layouts
