"""The main screen's first resume: Textual's restyle of every widget is skipped there (the mount has
just styled them; MainScreen.on_screen_resume), and nothing on screen is styled other than a full
restyle would style it. Fed by the SCRIPTED client of test_tui (no server)."""

from __future__ import annotations

import pytest
from textual.css.stylesheet import Stylesheet

from backend.server.client import Poll
from tests.helpers.console import app_with
from tui.screens.main import MainScreen


def styles_of(screen: MainScreen) -> dict[str, str]:
    return {f"{type(n).__name__}#{n.id}@{i}": n.styles.css
            for i, n in enumerate(screen.walk_children(with_self=True))}


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_the_first_frame_is_styled_as_a_full_restyle_styles_it(qhome, size, monkeypatch):
    restyled: list[int] = []  # the size of each batch of nodes the stylesheet updated
    real = Stylesheet.update_nodes

    def counting(self, nodes, *a, **k):
        nodes = list(nodes)
        restyled.append(len(nodes))
        return real(self, nodes, *a, **k)

    monkeypatch.setattr(Stylesheet, "update_nodes", counting)
    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MainScreen)
        at_start = list(restyled)
        before = styles_of(screen)
        assert len(before) > 10
        screen.update_node_styles(animate=False)  # what the resume did
        await pilot.pause()
        full = max(restyled[len(at_start):])
        # at the start only the widgets a change touched (Textual's resume restyled all but one)
        assert full > 10 and max(at_start, default=0) < full // 2, at_start
        assert styles_of(screen) == before
