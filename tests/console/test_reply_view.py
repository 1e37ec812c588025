"""ReplyView (tui/widgets/reply.py): a long streamed reply is cut into segments at Markdown block
boundaries only, the block still arriving drawn as plain text, Markdown rendered in slices that let
the event loop run, and it ends as Rich's one-shot render of exactly the streamed text.
The stream is SCRIPTED (fixed chunks appended on a timer); no server."""

from __future__ import annotations

import asyncio
import gc

from textual.app import App, ComposeResult
from textual.strip import Strip

from tui.widgets.reply import FullCollectionsDeferred, MarkdownSegment, ReplyView, render_markdown, settled_length

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
    # a list after a paragraph is a new block (the paragraph is finished); an item after a list
    # may still be that list's (a loose list)
    assert settled_length("para\n\n- a\n- b", 1) == len("para\n\n")
    assert settled_length("- a\n\n- b\n\n  more of b", 1) == 0


class ReplyApp(App):
    def compose(self) -> ComposeResult:
        yield ReplyView()


def _one_shot(text: str, width: int) -> list[str]:
    """Rich's own render of the whole text at once, as plain lines."""
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console(width=width, force_terminal=True, color_system="truecolor")
    return [Strip(line).text.rstrip() for line in console.render_lines(Markdown(text), console.options, pad=False)]


async def test_a_streamed_reply_ends_as_its_text_in_few_renders():
    app = ReplyApp()
    async with app.run_test(size=(100, 30)) as pilot:
        view = app.query_one(ReplyView)
        pieces = [LONG[i:i + 7] for i in range(0, len(LONG), 7)]
        deferred = gc.get_threshold()[2]
        for piece in pieces:  # ~2,000 tokens at ~1,000/s
            view.append(piece)
            await asyncio.sleep(0.001)
        assert deferred >= 1_000_000  # no full collection while it streams
        assert len(view.segments) >= 1  # a closed segment was drawn from lines rendered while streaming
        await view.finish()
        await pilot.pause()
        assert gc.get_threshold()[2] < 1_000_000  # given back
        assert view.source == LONG
        assert "".join(view.segments) + view.tail == LONG
        assert view.renders < len(pieces) / 5  # coalesced, not one render per chunk
        final = view.query_one(MarkdownSegment)  # one segment: the whole reply rendered once
        assert final.source == LONG and len(view.children) == 1
        width = final.content_size.width
        shown = [final.render_line(y).text.rstrip() for y in range(final.get_content_height(None, None, width))]
        assert shown == _one_shot(LONG, width)  # exactly Rich's one-shot Markdown of the text
        assert "para para" in shown[0]
        view.append("more")  # after finish nothing changes
        assert view.source == LONG


async def test_the_block_still_streaming_is_plain_text_and_finished_blocks_are_markdown():
    app = ReplyApp()
    async with app.run_test(size=(60, 20)) as pilot:
        view = app.query_one(ReplyView)
        view.append("# Title here\n\n**bold** words still arriving")
        for _ in range(40):
            await pilot.pause(0.02)
            lines = [line.text.rstrip() for line in view._open._lines]
            if any("Title here" in line and "#" not in line for line in lines):
                break
        assert any("Title here" in line and "#" not in line for line in lines)  # the heading: Markdown
        assert any("**bold** words still arriving" in line for line in lines)  # the open block: as typed
        await view.finish()
        await pilot.pause()
        final = view.query_one(MarkdownSegment)
        text = [final.render_line(y).text for y in range(final.get_content_height(None, None, 58))]
        assert any("bold words still arriving" in line for line in text)  # now Markdown too


async def test_markdown_renders_in_slices_that_let_the_loop_run():
    ticks = 0
    done = asyncio.Event()

    async def ticker():
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    strips = await render_markdown(LONG * 4, 80, slice_s=0.001)
    done.set()
    await task
    assert [s.text.rstrip() for s in strips] == _one_shot(LONG * 4, 80)
    assert ticks > 5  # the loop ran between slices


def test_full_collections_wait_while_any_reply_streams():
    before = gc.get_threshold()
    FullCollectionsDeferred.begin()
    FullCollectionsDeferred.begin()
    assert gc.get_threshold()[2] >= 1_000_000 and gc.get_threshold()[:2] == before[:2]
    FullCollectionsDeferred.end()
    assert gc.get_threshold()[2] >= 1_000_000  # another still streams
    FullCollectionsDeferred.end()
    FullCollectionsDeferred.end()  # one too many: harmless
    assert gc.get_threshold() == before


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


async def test_a_new_width_renders_the_reply_again_and_a_removed_reply_finishes_quietly():
    app = ReplyApp()
    async with app.run_test(size=(100, 30)) as pilot:
        view = app.query_one(ReplyView)
        view.append(LONG)
        await pilot.pause(0.2)
        await view.finish()
        await pilot.pause()
        await pilot.resize_terminal(70, 30)
        final = view.query_one(MarkdownSegment)
        for _ in range(50):
            await pilot.pause(0.02)
            width = final.content_size.width
            if final._width == width and width <= 70:
                break
        assert width <= 70
        shown = [final.render_line(y).text.rstrip() for y in range(final.get_content_height(None, None, width))]
        assert shown == _one_shot(LONG, width)

        other = ReplyView()
        await app.screen.mount(other)
        other.append("# gone\n\nsoon")
        await other.remove()
        await other.finish()  # the chat cleared while it streamed: no error, the GC given back
        assert other.finished and gc.get_threshold()[2] < 1_000_000
