"""One chat with the served model: the send sequence that `qwen-tui chat` and the console's chat pane
both drive, so it exists once.

A send counts the request against max_model_len (backend/chat/context_budget.py; the server's usage of
the last reply makes most counts free), leaves the oldest exchanges out when asked to and that makes
it fit, streams the reply (each delta to the caller), records the exchange with its figures, keeps
the usage for the next count, and appends it to the conversation's file (backend/chat/store.py)
when the session has a store. A reply cut by a cancel (esc, ctrl+c) is recorded and saved as cut.
The session holds the conversation and what it knows of its context; it never prints nor draws.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backend.chat.conversation import ChatParams, Conversation, figures_line, reply_figures

if TYPE_CHECKING:
    import httpx

    from backend.chat.context_budget import Budget
    from backend.chat.store import Store
    from backend.chat.stream import ChatResult
    from backend.settings import Settings

DeltaFn = Callable[[str], object]  # called with each text delta, as it arrives (a returned awaitable is awaited)


class ContextRefused(Exception):
    """The request would not fit max_model_len: not sent. `drop` is the fewest oldest exchanges that
    would make it fit (None: leaving history out does not, or it could not be counted)."""

    def __init__(self, budget: Budget, drop: int | None) -> None:
        super().__init__(budget.refusal())
        self.budget, self.drop = budget, drop


@dataclass
class Reply:
    """One send's outcome: the reply's figures, its budget, its figures line, the turns it added
    (none for an empty reply), why it was not saved ('' when it was or the session keeps none)."""

    result: ChatResult
    budget: Budget | None  # None only for a send cut before it was counted
    line: str
    new: list[dict[str, Any]]
    unsaved: str = ""
    cut: bool = False
    notes: list[str] = field(default_factory=list)


class ChatSession:
    """The conversation being had and how to reach the server; `send()` is the one send sequence."""

    def __init__(self, settings: Settings | Callable[[], Settings], conversation: Conversation | None = None,
                 store: Store | None = None, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._settings = settings  # or how to read them now (the console's, as its edits replace them)
        self.conversation = conversation if conversation is not None else self.new_conversation()
        self.store = store  # None: nothing is saved (a one-off `qwen-tui chat`)
        self.transport = transport  # an httpx transport for the client (tests, benchmarks); None: network
        self.endpoint: tuple[str, str] | None = None  # (base_url, model) of the running server; None: settings
        self.ceiling: float | Callable[[], float | None] | None = None  # the ledger's batch-1 decode ceiling
        self.extra: dict[str, Any] | None = None  # extra request fields (tests: ignore_eos)
        self.max_model_len: int | None = None
        self.known: tuple[int, int] | None = None  # (tokens, messages) the last usage covered
        self.last: Reply | None = None  # the last send's outcome (a cut one's too, read after the cancel)
        self.result: ChatResult | None = None  # the last send's figures, so far (a failed one's too)
        self._http: httpx.AsyncClient | None = None

    # -- what it sends to ---------------------------------------------------------------------------
    @property
    def settings(self) -> Settings:
        return self._settings() if callable(self._settings) else self._settings

    def new_conversation(self) -> Conversation:
        return Conversation(params=ChatParams.from_chat(self.settings.chat))

    def target(self) -> tuple[str, str]:
        """(base_url, model): the running server's when known, else the settings'."""
        return self.endpoint or (self.settings.base_url, self.settings.served_name)

    def client(self) -> httpx.AsyncClient:
        from backend.chat.stream import new_client  # httpx: not before the first request (start-up)

        if self._http is None:  # one client (and connection) for the session's life
            self._http = new_client(self.settings.api_key, self.transport)  # key file, env or config
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    def switch(self, conversation: Conversation) -> None:
        """Make `conversation` the session's: what was known of the old one's context is forgotten."""
        self.conversation, self.known = conversation, None

    # -- the context budget -------------------------------------------------------------------------
    async def count(self, prompt: str | None = None, max_tokens: int | None = None) -> Budget:
        """The budget of sending `prompt` after the history (None: the history alone)."""
        from backend.chat.context_budget import count  # httpx: not before the first request (start-up)
        from backend.httpclient import headers

        base_url, model = self.target()
        conv = self.conversation
        messages = conv.messages(prompt) if prompt is not None else conv.history()
        known, at = self.known or (None, 0)
        budget = await count(self.client(), base_url, model, messages,
                             max_tokens if max_tokens is not None else conv.params.max_tokens,
                             max_model_len=self.max_model_len, known_history=known, history_at=at,
                             headers=headers(self.settings.api_key))
        self.max_model_len = budget.max_model_len or self.max_model_len
        return budget

    async def fewest_to_drop(self, prompt: str, budget: Budget) -> int | None:
        """The fewest oldest exchanges to leave out so `prompt` fits (None: none does, or no count)."""
        from backend.chat.context_budget import exchanges_to_drop, split_exchanges  # httpx: start-up
        from backend.httpclient import headers

        conv = self.conversation
        if not conv.exchanges_in_context() or not budget.max_model_len:
            return None
        base_url, model = self.target()
        system = conv.history()[:1] if conv.system_prompt else []
        return await exchanges_to_drop(self.client(), base_url, model, system,
                                       split_exchanges(conv.turns[conv.context_start:]),
                                       {"role": "user", "content": prompt}, budget.max_tokens,
                                       budget.max_model_len, headers(self.settings.api_key))

    def drop_oldest(self, exchanges: int) -> None:
        """Leave the oldest `exchanges` out of the context (kept in the file); saved when it has one."""
        self.conversation.drop_oldest(exchanges)
        self.known = None  # the usage covered them
        if self.store is not None and self.conversation.turns:
            self.store.save_context(self.conversation)

    def budget_now(self) -> Budget | None:
        """The context as last known (from the usage or the last count), for the line under the input."""
        from backend.chat.context_budget import Budget  # start-up: with the first count

        if self.known is None:
            return None
        return Budget(self.known[0], self.conversation.params.max_tokens, self.max_model_len, exact=True)

    # -- the send -----------------------------------------------------------------------------------
    async def send(self, prompt: str, on_delta: DeltaFn | None = None, *, max_tokens: int | None = None,
                   drop_oldest: bool = False,
                   on_budget: Callable[[Budget], object] | None = None) -> Reply:
        """Count, (drop the oldest exchanges when asked and that fits), stream, record, save.

        Raises ContextRefused when it would not fit (nothing sent), backend.chat.stream.ChatError when the
        server refuses or fails (nothing recorded; `self.result` has what arrived); a cancel records
        and saves what arrived as cut (in `self.last`) and propagates."""
        from backend.chat.stream import ChatResult, stream_chat  # httpx: not before the first request (start-up)

        conv, params = self.conversation, self.conversation.params
        max_tokens = max_tokens if max_tokens is not None else params.max_tokens
        base_url, model = self.target()
        notes: list[str] = []
        self.result = result = ChatResult()
        self.last = None
        budget: Budget | None = None
        try:
            budget = await self.count(prompt, max_tokens)
            if budget.fits is False:
                drop = await self.fewest_to_drop(prompt, budget)
                if drop_oldest and drop:
                    await asyncio.to_thread(self.drop_oldest, drop)
                    notes.append(f"left the oldest {drop} exchange{'s' if drop != 1 else ''} out of the context")
                    budget = await self.count(prompt, max_tokens)
                if budget.fits is False:
                    raise ContextRefused(budget, drop)
            if on_budget is not None:
                await _maybe(on_budget(budget))
            async for delta in stream_chat(base_url, model, conv.messages(prompt), max_tokens=max_tokens,
                                           temperature=params.temperature, top_p=params.top_p,
                                           api_key=self.settings.api_key, result=result, client=self.client(),
                                           extra=self.extra):
                if on_delta is not None:
                    await _maybe(on_delta(delta.text))
        except (asyncio.CancelledError, KeyboardInterrupt):
            # what arrived stays in the history, marked as cut; the stream is closed (vLLM aborts)
            self.last = self._finish(conv, prompt, result, budget, cut=True, notes=notes)
            self.last.unsaved = self._save(conv, self.last.new, result.model or model, base_url, model)
            raise
        reply = self._finish(conv, prompt, result, budget, cut=False, notes=notes)
        reply.unsaved = await asyncio.to_thread(self._save, conv, reply.new, result.model or model, base_url, model)
        self.last = reply
        return reply

    def _finish(self, conv: Conversation, prompt: str, result: ChatResult, budget: Budget | None, *, cut: bool,
                notes: list[str]) -> Reply:
        line = figures_line(result, self._ceiling())
        new = conv.record(prompt, result.text, reply_figures(result), line, cut=cut)
        # the usage counts the history for the next send; a cut reply without usage is counted then
        if result.prompt_tokens is not None and result.completion_tokens is not None:
            if conv is self.conversation:
                self.known = (result.prompt_tokens + result.completion_tokens, len(conv.history()))
        elif cut and conv is self.conversation:
            self.known = None
        return Reply(result, budget, line, new, cut=cut, notes=notes)

    def _ceiling(self) -> float | None:
        return self.ceiling() if callable(self.ceiling) else self.ceiling

    def _save(self, conv: Conversation, new: list[dict[str, Any]], served: str, base_url: str, model: str) -> str:
        """Append the exchange to the conversation's file; '' or why it was not saved."""
        from backend.chat.store import StoreError, server_record  # start-up: with the first reply

        if self.store is None or not new:
            return ""
        try:
            self.store.save_server(conv, served, server_record(self.settings, base_url, model))
            self.store.add_turns(conv, new)
        except StoreError as e:
            return f"not saved: {e}"
        return ""


async def _maybe(value: Any) -> None:
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        await value
