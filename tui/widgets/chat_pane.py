"""ChatPane: a conversation with the local server, streamed as Markdown (tui/widgets/reply.py keeps
the keyboard responsive while it streams), with the figures people watch (time to first token,
tokens/s beside the batch-1 ceiling, or "burst") under each reply. One HTTP client serves every
request of the pane.

Each conversation is saved as it goes (backend/chat/store.py); ctrl+o (or `o` on the
transcript) lists them to reopen; ctrl+s edits this chat's sampling settings. Before a message is
sent its prompt is counted against max_model_len (backend/chat/context_budget.py) and the budget shows
under the input; one that would not fit is not sent. esc cuts a streaming reply: the stream is
closed (vLLM aborts the request), the partial reply is kept and marked as cut.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Static

from backend.chat.conversation import ChatParams, Conversation, reply_line
from backend.chat.session import ChatSession
from tui.messages import BudgetCounted, ChatDelta, ChatFinished, ChatRefused, ClipboardDelivered
from tui.node import QwenNode

if TYPE_CHECKING:  # start-up: the pane's content and its store load when the chat is first shown
    import httpx
    from textual import events
    from textual.widget import Widget

    from backend.chat.context_budget import Budget
    from backend.chat.store import Store
    from tui.widgets.reply import ReplyView
    from tui.widgets.transcript import Transcript
    from tui.widgets.waiting_line import WaitingLine

DEMO_NOTE = "demo model: random weights (its replies are word salad, not answers)\n"
COALESCE_S = 0.05  # join deltas for 50 ms; the ReplyView renders at the pace its renders allow
HELP = ("Ask the served model something. Every key here is text. enter: send · esc: stop the reply "
        "(kept, marked cut) · esc esc: back to the log · ctrl+n: new chat (this one stays saved) · "
        "ctrl+o: saved chats · ctrl+s: this chat's settings · ↑: the transcript (y copies a reply or "
        "code block) · ctrl+y: copy the last reply")


def preload() -> None:
    """What the first chat needs (httpx, rich.markdown, the pane's widgets), imported in a thread a
    second after the console's first frame (tui/screens/main.py), before anyone presses c."""
    import backend.chat.store  # noqa: F401 - the pane's content, built when the chat is first shown
    import backend.chat.stream  # noqa: F401
    import tui.widgets.chat_input  # noqa: F401
    from tui.widgets.reply import warm_up

    warm_up()


class ChatPane(QwenNode, Vertical):
    DEFAULT_CSS = """
    ChatPane { height: 1fr; }
    ChatPane #chat-log { height: 1fr; padding: 0 1; }
    ChatPane #chat-log:focus { background: $boost; }
    ChatPane .user { color: $accent; margin-top: 1; text-style: bold; }
    ChatPane .reply { margin: 0; }
    ChatPane .reply.-cursor { background: $primary 20%; }
    ChatPane .figures { color: $text-muted; }
    ChatPane .error { color: $error; }
    ChatPane #chat-foot { dock: bottom; height: auto; }
    ChatPane #chat-budget, ChatPane #chat-cursor { color: $text-muted; height: 1; padding: 0 1; }
    """
    BINDINGS = [
        Binding("escape", "stop_or_leave", "Stop reply; esc esc: back to the log", id="chat-stop"),
        Binding("ctrl+n", "new_conversation", "New chat", id="chat-new"),
        Binding("ctrl+y", "copy_reply", "Copy reply", id="chat-copy"),
        Binding("ctrl+o", "conversations", "Saved chats", id="chat-open"),
        Binding("ctrl+s", "chat_settings", "Chat settings", id="chat-settings"),
        Binding("up", "transcript", "Transcript (copy a reply or code block)", id="chat-transcript"),
    ]

    class Escaped(Message):
        """esc with no reply streaming: the screen decides (a second one leaves the chat)."""

    def __init__(self, store: Store | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._store = store  # made by build() when None
        # the one send sequence (backend/chat/session.py, which `qwen-tui chat` drives too); the pane
        # turns its deltas and outcomes into messages and widgets
        self.session = ChatSession(lambda: self.app.settings, Conversation(), store)
        self.built = False  # its widgets: made the first time the chat is shown (build())
        self._build_lock = asyncio.Lock()
        self.streaming = False
        # (base_url, model) of the running server, set by the screen from each poll; None: settings
        self._endpoint_value: tuple[str, str] | None = None
        self._reply: ReplyView | None = None
        self._pending: list[Widget] = []  # the user line and reply of the message being sent
        self._waiting: WaitingLine | None = None  # until the first delta
        self.budget: Budget | None = None  # the last one counted

    @property
    def store(self) -> Store:
        """The conversations' store: the one given, or the default one, made when the chat is built."""
        if self._store is None:
            raise RuntimeError("the chat pane's store is made when the chat is first shown (build())")
        return self._store

    # the session's, by the names the screen, the benchmarks and the tests use
    @property
    def conversation(self) -> Conversation:
        return self.session.conversation

    @conversation.setter
    def conversation(self, conv: Conversation) -> None:
        self.session.switch(conv)

    @property
    def ceiling(self) -> float | None:
        """The ledger's batch-1 decode ceiling, when known (set by the screen)."""
        return self.session.ceiling if not callable(self.session.ceiling) else self.session.ceiling()

    @ceiling.setter
    def ceiling(self, value: float | None) -> None:
        self.session.ceiling = value

    @property
    def request_extra(self) -> dict[str, Any] | None:
        """Extra request fields (tests: ignore_eos)."""
        return self.session.extra

    @request_extra.setter
    def request_extra(self, value: dict[str, Any] | None) -> None:
        self.session.extra = value

    @property
    def transport(self) -> httpx.AsyncBaseTransport | None:
        """An httpx transport for the pane's client (benchmarks, tests); None: the network."""
        return self.session.transport

    @transport.setter
    def transport(self, value: httpx.AsyncBaseTransport | None) -> None:
        self.session.transport = value

    def on_mount(self) -> None:
        self.conversation = self._new_conversation()

    async def build(self) -> None:
        """The pane's widgets, made the first time the chat is shown (start-up: the hidden tab's
        widgets, their styles and their modules are not on the way to the console's first frame).
        The screen awaits it before it shows the chat; a second caller waits for the first."""
        async with self._build_lock:
            if self.built:
                return
            from backend.chat.store import Store  # start-up: loaded on first use, not with the console
            from tui.widgets.chat_input import ChatInput  # start-up: loaded on first use, not with the console
            from tui.widgets.transcript import Transcript  # start-up: loaded on first use, not with the console

            if self._store is None:
                self._store = Store()
            self.session.store = self._store
            cursor = Static("", id="chat-cursor", markup=False)
            cursor.display = False
            # select_on_focus off: a key typed while focus was elsewhere lands in the input (the screen
            # routes it there) and must not select, then replace, what was already typed
            await self.mount_all([
                Transcript(Static(self._demo_note() + HELP, classes="figures"), id="chat-log"),
                Vertical(ChatInput(placeholder="message (enter: send)", id="chat-input", select_on_focus=False),
                         Static("context: counted when you send", id="chat-budget", markup=False),
                         cursor, id="chat-foot")])
            self.built = True
        if self._endpoint_value is not None and not self.streaming:
            self.session.max_model_len, self.session.known = None, None
            self.refresh_budget()  # a server that was up before the chat was first shown

    def _demo_note(self) -> str:
        """The chat's head line in --demo: its replies are a random model's, not a broken terminal."""
        return DEMO_NOTE if getattr(self.app.settings, "demo", False) else ""

    @property
    def endpoint(self) -> tuple[str, str] | None:
        return self._endpoint_value

    @endpoint.setter
    def endpoint(self, value: tuple[str, str] | None) -> None:
        """A server came up (or moved): count the context once, so the budget shows before a send."""
        changed = value != self._endpoint_value
        self._endpoint_value = self.session.endpoint = value
        if changed and value is not None and self.built and not self.streaming:
            self.session.max_model_len, self.session.known = None, None
            self.refresh_budget()

    def _new_conversation(self) -> Conversation:
        return self.session.new_conversation()

    def focus_input(self) -> None:
        self.query_one("#chat-input", Input).focus()

    def help_in_view(self) -> bool:
        """Whether the transcript's top, where HELP says every key is text, is on screen."""
        return self.query_one("#chat-log").scroll_y == 0

    # -- sending ---------------------------------------------------------------------------------
    @on(Input.Submitted, "#chat-input")
    async def submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if self.streaming:
            self.app.notify("a reply is still streaming: esc stops it", severity="warning")
            return
        event.input.value = ""
        await self.send(text)

    async def send(self, text: str) -> None:
        from tui.widgets.reply import ReplyView  # start-up: loaded on first use, not with the console
        from tui.widgets.waiting_line import WaitingLine  # start-up: loaded on first use, not with the console

        log = self.query_one("#chat-log", VerticalScroll)
        self._reply = ReplyView(classes="reply")
        self._waiting = WaitingLine()
        self._pending = [Static(f"› {text}", classes="user", markup=False), self._waiting, self._reply]
        await log.mount_all(self._pending)
        log.anchor()
        self.streaming = True
        self.ask(text)

    @work(group="chat", exclusive=True, exit_on_error=False)
    async def ask(self, text: str) -> None:
        """The session's send, its deltas and its end as messages. Never touches widgets."""
        from backend.chat.session import ContextRefused  # start-up: loaded on first use, not with the console
        from backend.chat.stream import ChatError  # httpx: not before the first chat

        conv = self.conversation
        pending: list[str] = []
        last = time.monotonic()

        def delta(text: str) -> None:
            nonlocal pending, last
            pending.append(text)
            if time.monotonic() - last >= COALESCE_S:
                self.post_message(ChatDelta("".join(pending)))
                pending, last = [], time.monotonic()

        try:
            reply = await self.session.send(text, delta, on_budget=lambda b: self.post_message(BudgetCounted(b)))
            if pending:
                self.post_message(ChatDelta("".join(pending)))
            self.post_message(ChatFinished(reply.result, reply.line + _unsaved(reply.unsaved), conversation=conv))
        except ContextRefused as e:
            self.post_message(ChatRefused(text, e.budget, e.drop))
        except ChatError as e:
            self.post_message(ChatFinished(self.session.result, "", error=e.message, fix=e.fix, conversation=conv))
        except asyncio.CancelledError:
            # the session kept what arrived, marked as cut, and saved it; the stream is closed (vLLM aborts)
            cut = self.session.last
            if cut is not None:
                if cut.result.prompt_tokens is None or cut.result.completion_tokens is None:
                    self.budget = None  # counted on the next send, never the count from before this exchange
                self.post_message(ChatFinished(cut.result, (reply_line(cut.new[1]) if cut.new else
                                                            cut.line + " · ✂ cut by esc") + _unsaved(cut.unsaved),
                                               cancelled=True, conversation=conv))
            else:  # cancelled while counting: nothing was sent
                self.post_message(ChatFinished(self.session.result, "", cancelled=True, conversation=conv))
            raise
        except Exception as e:  # never a traceback on screen
            self.post_message(ChatFinished(self.session.result, "", error=f"{type(e).__name__}: {e}",
                                           conversation=conv))

    @on(ChatDelta)
    async def delta(self, message: ChatDelta) -> None:
        message.stop()
        await self._stop_waiting()
        if self._reply is not None:
            self._reply.append(message.text)

    async def _stop_waiting(self) -> None:
        if self._waiting is not None:
            waiting, self._waiting = self._waiting, None
            await waiting.remove()

    @on(ChatFinished)
    async def finished(self, message: ChatFinished) -> None:
        if message.conversation is not None and message.conversation is not self.conversation:
            self.streaming = False  # a reply of a conversation no longer shown (ctrl+n, reopen)
            return
        await self._stop_waiting()
        if self._reply is not None:
            await self._reply.finish()
        self.streaming = False
        if message.conversation is not None and message.conversation is not self.conversation:
            return  # replaced while the reply was finishing
        self._pending = []
        log = self.query_one("#chat-log", VerticalScroll)
        if message.error:
            await log.mount(Static(f"{message.error}\n  fix: {message.fix or 'see the server log'}",
                                   classes="error", markup=False))
        else:
            await log.mount(Static(message.line, classes="figures", markup=False))
        self._show_budget()
        # bubbles on to the screen (the ledger panel shows the measured tokens/s)

    @on(ChatRefused)
    async def refused(self, message: ChatRefused) -> None:
        from tui.screens.context_fit import ContextFitScreen  # start-up: loaded on first use, not with the console

        message.stop()
        self._waiting = None
        for w in self._pending:
            await w.remove()
        self._pending, self._reply, self.streaming = [], None, False
        box = self.query_one("#chat-input", Input)
        box.value = message.text
        self.budget = message.budget
        self._show_budget()
        lower = message.budget.max_tokens_that_fit

        async def chosen(choice: str | None) -> None:
            if choice == "drop" and message.drop:
                self.conversation.drop_oldest(message.drop)
                self.session.known = None  # the usage covered what is left out now
                await self._run_store(self.store.save_context, self.conversation)
            elif choice == "lower" and lower >= 1:
                self.conversation.params.max_tokens = lower
                await self._run_store(self.store.save_params, self.conversation)
            else:
                self.focus_input()
                return
            box.value = ""
            await self.send(message.text)

        self.app.push_screen(ContextFitScreen(message.budget.refusal(), message.drop, lower), chosen)

    async def _run_store(self, fn: Callable[[Conversation], object], conv: Conversation) -> None:
        from backend.chat.store import StoreError  # start-up: loaded on first use, not with the console

        if not conv.turns:  # nothing saved yet: kept in memory, written with the first reply
            return
        try:
            await asyncio.to_thread(fn, conv)
        except StoreError as e:
            self.app.notify(f"not saved: {e}", severity="error")

    @on(BudgetCounted)
    def budget_counted(self, message: BudgetCounted) -> None:
        message.stop()
        self.budget = message.budget
        self._show_budget()

    def _show_budget(self) -> None:
        from backend.chat.context_budget import Budget  # start-up: loaded on first use, not with the console

        if not self.built:  # drawn when it is (build())
            return
        conv = self.conversation
        b = self.session.budget_now()  # from the last usage, when it covers the history
        if b is None and self.budget is not None:
            b = Budget(self.budget.prompt_tokens, conv.params.max_tokens, self.budget.max_model_len, self.budget.exact)
        if b is None:
            self.query_one("#chat-budget", Static).update("context: counted when you send")
            return
        left_out = conv.exchanges_in_context() != sum(1 for t in conv.turns if t["role"] == "user")
        extra = f" · {conv.context_start // 2} oldest exchanges left out" if left_out else ""
        self.query_one("#chat-budget", Static).update(b.text() + extra)

    async def on_unmount(self) -> None:
        await self.session.aclose()

    # -- keys ------------------------------------------------------------------------------------
    def action_stop_or_leave(self) -> None:
        """Focus stays in the input either way: esc never leaves the letters to the commands."""
        if self.streaming:
            self.workers.cancel_group(self, "chat")
        else:
            self.post_message(self.Escaped())
        self.focus_input()

    async def _cancel_reply(self) -> None:
        """Cut a streaming reply (kept in its conversation, marked) and wait for its worker to end."""
        if self.streaming:
            # start-up: loaded on first use, not with the console
            from textual.worker import WorkerCancelled, WorkerFailed

            chat = [w for w in self.workers if w.group == "chat" and w.node is self]
            self.workers.cancel_group(self, "chat")
            for worker in chat:
                try:
                    await worker.wait()
                except (WorkerCancelled, WorkerFailed):
                    pass
            deadline = time.monotonic() + 2.0  # its ChatFinished, when handled beside this action
            while self.streaming and time.monotonic() < deadline:
                await asyncio.sleep(0.02)

    async def action_new_conversation(self) -> None:
        await self._cancel_reply()
        old = self.conversation
        await self.show(self._new_conversation())
        if old.turns:
            self.app.notify(f"“{old.title}” is saved (ctrl+o lists the saved chats)", timeout=4)

    async def show(self, conv: Conversation, header: str = "new conversation") -> None:
        """Make `conv` the pane's conversation and draw its turns, each reply with its figures."""
        from tui.widgets.reply import ReplyView  # start-up: loaded on first use, not with the console
        from tui.widgets.transcript import Transcript  # start-up: loaded on first use, not with the console

        await self.build()
        self.conversation, self.budget, self._reply = conv, None, None  # the session forgets the old one's usage
        log = self.query_one("#chat-log", Transcript)
        log.cursor = -1
        await log.remove_children()
        await log.mount(Static(self._demo_note() + header, classes="figures", markup=False))
        replies: list[tuple[ReplyView, str]] = []
        widgets: list[Widget] = []
        for t in conv.turns:
            if t["role"] == "user":
                widgets.append(Static(f"› {t['content']}", classes="user", markup=False))
            else:
                reply = ReplyView(classes="reply")
                replies.append((reply, t["content"]))
                widgets += [reply, Static(reply_line(t) or "(no figures saved)", classes="figures", markup=False)]
        if widgets:
            await log.mount_all(widgets)
        for reply, text in replies:
            reply.append(text)
            await reply.finish()
        log.scroll_end(animate=False)
        self._show_budget()
        if conv.turns:
            self.refresh_budget()

    @work(group="chat-budget", exclusive=True, exit_on_error=False)
    async def refresh_budget(self) -> None:
        """Count the reopened history (so the line under the input is exact before the first send)."""
        try:
            budget = await self.session.count()
        except Exception:  # noqa: BLE001 - a server that is not there yet: counted on send instead
            return
        if budget.prompt_tokens is not None:
            self.post_message(BudgetCounted(budget))

    def action_conversations(self) -> None:
        from tui.screens.conversations import ConversationsScreen  # start-up: loaded on first use, not with the console

        async def chosen(conv_id: str | None) -> None:
            if conv_id is None:
                if self.conversation.id and not self.store.path(self.conversation.id).exists():
                    await self.show(self._new_conversation(), "the open conversation was deleted: a new one")
                self.focus_input()
                return
            await self.reopen(conv_id)

        self.app.push_screen(ConversationsScreen(self.store, self.conversation.id), chosen)

    async def reopen(self, conv_id: str) -> None:
        from backend.chat.store import StoreError  # start-up: loaded on first use, not with the console

        await self._cancel_reply()
        try:
            conv = await asyncio.to_thread(self.store.load, conv_id, ChatParams.from_chat(self.app.settings.chat))
        except StoreError as e:
            self.app.notify(str(e), severity="error")
            return
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(conv.created))
        await self.show(conv, f"reopened “{conv.title}” · started {when} · {conv.model or 'model unknown'} · "
                              f"{conv.message_count()} messages")
        self.focus_input()

    def action_chat_settings(self) -> None:
        from tui.screens.chat_settings import ChatSettingsScreen  # start-up: loaded on first use, not with the console

        async def chosen(params: ChatParams | None) -> None:
            self.focus_input()
            if params is None or params == self.conversation.params:
                return
            if params.system_prompt != self.conversation.params.system_prompt:
                self.session.known = None  # the usage no longer covers the history
            self.conversation.params = params
            await self._run_store(self.store.save_params, self.conversation)
            self._show_budget()
            self.app.notify(f"this chat: temperature {params.temperature:g}, top_p {params.top_p:g}, "
                            f"max_tokens {params.max_tokens}" + (" (saved with it)" if self.conversation.turns else
                                                                 " (saved with its first reply)"))

        self.app.push_screen(ChatSettingsScreen(self.conversation.params, self.conversation.title,
                                               self.app.settings.chat), chosen)

    def action_transcript(self) -> None:
        self.query_one("#chat-log").focus()

    # Transcript's messages, by their handler names (start-up: tui.widgets.transcript is not imported
    # before the chat is first shown)
    def on_transcript_cursor_moved(self, message: Transcript.CursorMoved) -> None:
        cursor = self.query_one("#chat-cursor", Static)
        cursor.update(message.text)
        cursor.display = True

    def on_descendant_blur(self, event: events.DescendantBlur) -> None:
        if event.widget.id == "chat-log":  # the Transcript
            self.query_one("#chat-cursor").display = False

    def on_transcript_command(self, message: Transcript.Command) -> None:
        if message.name == "copy":
            if message.item is None:
                self.app.notify("nothing under the cursor to copy", severity="warning")
            else:
                self.copy_text(message.item.text, "the code block" if message.item.block else "the reply",
                               "code" if message.item.block else "reply")
        elif message.name == "open":
            self.action_conversations()
        elif message.name == "settings":
            self.action_chat_settings()
        else:
            self.focus_input()

    def action_copy_reply(self) -> None:
        reply = self.conversation.last_reply()
        if not reply:
            self.app.notify("no reply to copy yet", severity="warning")
            return
        self.copy_text(reply, "the last reply", "reply")

    def copy_text(self, text: str, what: str, kind: str) -> None:
        """OSC 52 at once (it reaches the SSH client's terminal); the local clipboard or a file in a thread."""
        from backend.clipboard import deliver  # start-up: loaded on first use, not with the console

        self.app.copy_to_clipboard(text)

        def work_() -> None:
            self.post_message(ClipboardDelivered(deliver(text, kind), what))

        self.run_worker(work_, thread=True, group="chat-copy", exit_on_error=False)

    @on(ClipboardDelivered)
    def clipboard_delivered(self, message: ClipboardDelivered) -> None:
        self.app.notify(message.delivery.text(message.what), timeout=10)


def _unsaved(why: str) -> str:
    return f" · {why}" if why else ""
