"""ReplyView (tui/widgets/reply.py): a long streamed reply is cut into segments at Markdown block
boundaries only, rendered at a pace the renders allow, and ends as exactly the streamed text.
The stream is SCRIPTED (fixed chunks appended on a timer); no server."""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult

from tui.widgets.reply import MarkdownSegment, ReplyView, settled_length

LONG = ("para " * 300 + "\n\n```python\nx = 1\n\n\ny = 2\n```\n\n- a\n\n- b\n\n  more of b\n\n# Next\n\n"
        + "word " * 400 + "\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nend\n")


def test_segments_end_only_where_a_block_ends():
    assert settled_length("short\n\nnext\n") == 0  # below the segment size
    cut = settled_length(LONG)
    assert LONG[cut:] == "end\n"  # the last block boundary
    head = LONG[:cut]
    assert head.count("```") % 2 == 0  # never inside a code fence
    assert not LONG[cut:].startswith((" ", "-", "\n"))  # not before a list item or an indented line
    # the blank lines inside the fenced code never cut it
    fenced = "x " * 700 + "\n\n```\n" + "code\n\n" * 50 + "```\n"
    assert settled_length(fenced) == 0 or fenced[:settled_length(fenced)].count("```") % 2 == 0


class ReplyApp(App):
    def compose(self) -> ComposeResult:
        yield ReplyView()


async def test_a_streamed_reply_ends_as_its_text_in_few_renders():
    app = ReplyApp()
    async with app.run_test(size=(100, 30)) as pilot:
        view = app.query_one(ReplyView)
        pieces = [LONG[i:i + 7] for i in range(0, len(LONG), 7)]
        for piece in pieces:  # ~2,000 tokens at ~1,000/s
            view.append(piece)
            await asyncio.sleep(0.001)
        await view.finish()
        await pilot.pause()
        assert view.source == LONG
        assert "".join(view.segments) + view.tail == LONG
        assert len(view.segments) >= 1 and len(view.query(MarkdownSegment)) == len(view.segments) + 1
        assert view.renders < len(pieces) / 5  # coalesced, not one render per chunk
        last = view.query(MarkdownSegment).last()
        assert str(last.styles.height) == "auto" and last.source == view.tail
        assert "".join(w.source for w in view.query(MarkdownSegment)) == LONG  # what is drawn is the text
        first = view.query(MarkdownSegment).first()
        assert "para para" in first.render_line(0).text  # drawn from its own rendered lines
        view.append("more")  # after finish nothing changes
        assert view.source == LONG


async def test_typing_in_the_chat_input_repaints_it_without_a_screen_layout():
    """Each key laid out the whole screen (~10 ms with a long reply shown); long text still scrolls."""
    from textual.widget import Widget

    from tui.widgets.chat_input import ChatInput

    class InputApp(App):
        def compose(self) -> ComposeResult:
            yield ChatInput(id="i")

    app = InputApp()
    async with app.run_test(size=(40, 10)) as pilot:
        box = app.query_one(ChatInput)
        box.focus()
        layouts = []
        real = Widget.refresh

        def spy(self, *a, layout=False, **kw):
            if layout:
                layouts.append(type(self).__name__)
            return real(self, *a, layout=layout, **kw)

        Widget.refresh = spy
        try:
            await pilot.press(*"a long message that does not fit in forty columns at all")
        finally:
            Widget.refresh = real
        await pilot.pause()
        assert box.value.endswith("at all") and not [n for n in layouts if "Input" in n]
        assert box.scroll_offset.x > 0  # the cursor end stays in view
