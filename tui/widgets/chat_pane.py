"""ChatPane: a conversation with the local server, streamed as Markdown (tui/widgets/reply.py keeps
the keyboard responsive while it streams), with the figures people watch (time to first token,
tokens/s beside the batch-1 ceiling, or "burst") under each reply. One HTTP client serves every
request of the pane."""

from __future__ import annotations

import asyncio
import time

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Static

from backend.conversation import Conversation, figures_line
from tui import clipboard
from tui.messages import ChatDelta, ChatFinished
from tui.widgets.chat_input import ChatInput
from tui.widgets.reply import ReplyView
from tui.worker_errors import WorkerErrorsToApp

COALESCE_S = 0.05  # join deltas for 50 ms; the ReplyView renders at the pace its renders allow


def _preload() -> None:
    import backend.chat  # noqa: F401
    from tui.widgets.reply import warm_up

    warm_up()


class ChatPane(WorkerErrorsToApp, Vertical):
    DEFAULT_CSS = """
    ChatPane { height: 1fr; }
    ChatPane #chat-log { height: 1fr; padding: 0 1; }
    ChatPane .user { color: $accent; margin-top: 1; text-style: bold; }
    ChatPane .reply { margin: 0; }
    ChatPane .figures { color: $text-muted; }
    ChatPane .error { color: $error; }
    ChatPane #chat-input { dock: bottom; }
    """
    BINDINGS = [
        Binding("escape", "stop_or_leave", "Stop reply; esc esc: back to the log", id="chat-stop"),
        Binding("ctrl+n", "new_conversation", "New chat", id="chat-new"),
        Binding("ctrl+y", "copy_reply", "Copy reply", id="chat-copy"),
    ]

    class Escaped(Message):
        """esc with no reply streaming: the screen decides (a second one leaves the chat)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.conversation = Conversation()
        self.ceiling: float | None = None  # the ledger's batch-1 decode ceiling, when known
        self.streaming = False
        # (base_url, model) of the running server, set by the screen from each poll; None: settings
        self.endpoint: tuple[str, str] | None = None
        self._reply: ReplyView | None = None
        self.transport = None  # an httpx transport for the pane's client (benchmarks, tests); None: network
        self._http = None  # the pane's one HTTP client, made on first use

    def compose(self) -> ComposeResult:
        yield VerticalScroll(Static("Ask the served model something. Every key here is text. enter: send · "
                                    "esc: stop the reply · esc esc: back to the log · ctrl+n: new chat · "
                                    "ctrl+y: copy the last reply", classes="figures"),
                             id="chat-log")
        # select_on_focus off: a key typed while focus was elsewhere lands in the input (the screen
        # routes it there) and must not select, then replace, what was already typed
        yield ChatInput(placeholder="message (enter: send)", id="chat-input", select_on_focus=False)

    def on_mount(self) -> None:
        self.conversation.system_prompt = self.app.settings.chat["system_prompt"]
        # what the first chat needs (httpx, rich.markdown) is imported off the first frame's path, in a thread
        self.set_timer(1.0, lambda: self.run_worker(_preload, thread=True, group="chat-preload", exit_on_error=False))

    def focus_input(self) -> None:
        self.query_one("#chat-input", Input).focus()

    @on(Input.Submitted, "#chat-input")
    async def submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if self.streaming:
            self.app.notify("a reply is still streaming: esc stops it", severity="warning")
            return
        event.input.value = ""
        log = self.query_one("#chat-log", VerticalScroll)
        self._reply = ReplyView(classes="reply")
        await log.mount_all([Static(f"› {text}", classes="user", markup=False), self._reply])
        log.anchor()
        self.streaming = True
        self.ask(text)

    @work(group="chat", exclusive=True, exit_on_error=False)
    async def ask(self, text: str) -> None:
        """Stream one reply; post deltas and the end. Never touches widgets."""
        from backend.chat import ChatError, ChatResult, new_client, stream_chat  # httpx: not before the first chat

        settings = self.app.settings
        result = ChatResult()
        pending: list[str] = []
        last = time.monotonic()
        try:
            base_url, model = self.endpoint or (settings.base_url, settings.served_name)
            if self._http is None:  # one client (and connection) for the pane's life
                self._http = new_client(settings.api_key, self.transport)  # key file, env or config
            async for delta in stream_chat(base_url, model,
                                           self.conversation.messages(text),
                                           max_tokens=int(settings.chat["max_tokens"]),
                                           temperature=float(settings.chat["temperature"]),
                                           result=result, client=self._http):
                pending.append(delta.text)
                if time.monotonic() - last >= COALESCE_S:
                    self.post_message(ChatDelta("".join(pending)))
                    pending, last = [], time.monotonic()
            if pending:
                self.post_message(ChatDelta("".join(pending)))
            self.conversation.record(text, result.text)
            self.post_message(ChatFinished(result, figures_line(result, self.ceiling)))
        except ChatError as e:
            self.post_message(ChatFinished(result, "", error=e.message, fix=e.fix))
        except asyncio.CancelledError:
            self.conversation.record(text, result.text)  # what arrived stays in the history
            self.post_message(ChatFinished(result, figures_line(result, self.ceiling) + " · stopped",
                                           cancelled=True))
            raise
        except Exception as e:  # never a traceback on screen
            self.post_message(ChatFinished(result, "", error=f"{type(e).__name__}: {e}"))

    @on(ChatDelta)
    async def delta(self, message: ChatDelta) -> None:
        message.stop()
        if self._reply is not None:
            self._reply.append(message.text)

    @on(ChatFinished)
    async def finished(self, message: ChatFinished) -> None:
        if self._reply is not None:
            await self._reply.finish()
        self.streaming = False
        log = self.query_one("#chat-log", VerticalScroll)
        if message.error:
            await log.mount(Static(f"{message.error}\n  fix: {message.fix or 'see the server log'}",
                                   classes="error", markup=False))
        else:
            await log.mount(Static(message.line, classes="figures", markup=False))
        # bubbles on to the screen (the ledger panel shows the measured tokens/s)

    async def on_unmount(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    def action_stop_or_leave(self) -> None:
        """Focus stays in the input either way: esc never leaves the letters to the commands."""
        if self.streaming:
            self.workers.cancel_group(self, "chat")
        else:
            self.post_message(self.Escaped())
        self.focus_input()

    async def action_new_conversation(self) -> None:
        if self.streaming:
            self.workers.cancel_group(self, "chat")
        self.conversation.clear()
        log = self.query_one("#chat-log", VerticalScroll)
        await log.remove_children()
        await log.mount(Static("new conversation", classes="figures"))

    def action_copy_reply(self) -> None:
        reply = self.conversation.last_reply()
        if not reply:
            self.app.notify("no reply to copy yet", severity="warning")
            return
        self.app.notify(f"copied {len(reply)} characters: {clipboard.copy(self.app, reply)}")
