"""One chat conversation: its turns, the sampling settings it runs with, what is sent, the figures line.

Plain data; backend.chat.store keeps it on disk (JSON lines), the console's ChatPane renders
it and backend.chat.stream streams each reply. An assistant turn may carry the reply's figures (`figures`:
ChatResult.as_dict() without the text, `line`: the figures line shown under it) and `cut` when esc
stopped it; what is sent is only each turn's role and content.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from backend.settings.spec import CHAT, range_words

if TYPE_CHECKING:  # the console's first frame does not need httpx: backend.chat.stream is imported on first use
    from backend.chat.stream import ChatResult


# each parameter's help and range are its [chat] key's (backend/settings/spec.py)
PARAM_HELP = {name: key.help + (f", {range_words(key.range)}" if key.range else "") for name, key in CHAT.items()}


@dataclass
class ChatParams:
    """What one conversation samples with; the defaults come from `[chat]`."""

    system_prompt: str = ""  # a conversation saved without one has none (the [chat] default is for new ones)
    temperature: float = CHAT["temperature"].default
    top_p: float = CHAT["top_p"].default
    max_tokens: int = CHAT["max_tokens"].default

    @classmethod
    def from_chat(cls, chat: dict[str, Any]) -> ChatParams:
        """From the `[chat]` settings (keys missing there keep these defaults)."""
        return cls.from_dict(chat, cls())

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, base: ChatParams | None = None) -> ChatParams:
        """`base` with the valid keys of `data` applied (a damaged file keeps the defaults)."""
        out = ChatParams(**asdict(base or cls()))
        for f in fields(cls):
            if isinstance(data, dict) and f.name in data:
                try:
                    setattr(out, f.name, parse_param(f.name, data[f.name]))
                except ValueError:
                    pass
        return out

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_param(name: str, value: Any) -> Any:
    """One per-chat setting from text or a value; ValueError says what is accepted."""
    if name == "system_prompt":
        return str(value)
    key = CHAT.get(name)
    if key is None or key.range is None:
        raise ValueError(f"unknown chat setting {name!r}")
    low, high = key.range
    assert low is not None  # every chat number has a lowest value
    kind = int if key.type is int else float
    try:
        if isinstance(value, bool):
            raise ValueError
        number = kind(str(value).strip()) if isinstance(value, str) else kind(value)
        if kind is int and not isinstance(value, str) and number != value:
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {value!r} is not {'a whole number' if kind is int else 'a number'}") from None
    if number < low or (high is not None and number > high):
        raise ValueError(f"{name}: {number:g} is out of range ({range_words(key.range)})")
    return number


def default_title(text: str, width: int = 48) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"


class Conversation:
    """Turns ({"role": "user"|"assistant", "content", ...}) and what they ran under.

    `context_start` is the first turn still sent: older turns dropped to fit max_model_len stay in
    the conversation (and its file) but are no longer part of the request.
    """

    def __init__(self, system_prompt: str = "", turns: list[dict[str, Any]] | None = None, *,
                 params: ChatParams | None = None, id: str = "", title: str = "",
                 created: float | None = None, model: str = "", server: dict[str, Any] | None = None) -> None:
        self.params = params or ChatParams(system_prompt=system_prompt)
        self.turns: list[dict[str, Any]] = turns if turns is not None else []
        self.id, self.title, self.model = id, title, model
        self.created = created if created is not None else time.time()
        self.updated = self.created
        self.server: dict[str, Any] = server or {}
        self.context_start = 0

    @property
    def system_prompt(self) -> str:
        return self.params.system_prompt

    @system_prompt.setter
    def system_prompt(self, value: str) -> None:
        self.params.system_prompt = value

    def history(self) -> list[dict[str, str]]:
        """System prompt and the turns still in the context, as the request carries them."""
        head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return head + [{"role": t["role"], "content": t["content"]} for t in self.turns[self.context_start:]]

    def messages(self, user_text: str) -> list[dict[str, str]]:
        """What to send for a new user message: system prompt, earlier turns, the new message."""
        return self.history() + [{"role": "user", "content": user_text}]

    def record(self, user_text: str, reply: str, figures: dict[str, Any] | None = None, line: str = "",
               cut: bool = False) -> list[dict[str, Any]]:
        """Keep a finished (or cut) exchange; returns the new turns. A failed or empty reply keeps
        nothing, so a retry resends cleanly."""
        if not reply:
            return []
        now = time.time()
        assistant: dict[str, Any] = {"role": "assistant", "content": reply}
        if figures is not None:
            assistant["figures"] = figures
        if line:
            assistant["line"] = line
        if cut:
            assistant["cut"] = True
        new = [{"role": "user", "content": user_text}, assistant]
        self.turns += new
        self.updated = now
        if not self.title:
            self.title = default_title(user_text)
        return new

    def exchanges_in_context(self) -> int:
        return sum(1 for t in self.turns[self.context_start:] if t["role"] == "user")

    def drop_oldest(self, exchanges: int) -> int:
        """Stop sending the oldest `exchanges` user/assistant pairs; returns the new context_start."""
        seen, i = 0, self.context_start
        while i < len(self.turns) and seen < exchanges:
            i += 1
            while i < len(self.turns) and self.turns[i]["role"] != "user":
                i += 1
            seen += 1
        self.context_start = i
        return i

    def clear(self) -> None:
        self.turns.clear()
        self.context_start = 0

    def last_reply(self) -> str | None:
        return next((t["content"] for t in reversed(self.turns) if t["role"] == "assistant"), None)

    def replies(self) -> list[dict[str, Any]]:
        return [t for t in self.turns if t["role"] == "assistant"]

    def message_count(self) -> int:
        return len(self.turns)

    def transcript(self) -> str:
        """The conversation as Markdown (what `copy all` puts on the clipboard)."""
        return "\n\n".join(f"**{t['role']}**: {t['content']}" for t in self.turns)


def reply_line(turn: dict[str, Any]) -> str:
    """The line shown under a saved reply: its figures, and whether esc cut it."""
    line = turn.get("line") or ""
    if turn.get("cut"):
        line = (line + " · " if line else "") + "✂ cut by esc (partial reply)"
    return line


def to_markdown(conv: Conversation) -> str:
    """The conversation as a Markdown document: title, what it ran under, each turn with its figures."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(conv.created))
    out = [f"# {conv.title or 'Untitled conversation'}", ""]
    meta = [f"- id: `{conv.id}`" if conv.id else "", f"- started: {when}",
            f"- model: {conv.model or 'unknown'}"]
    server = {k: v for k, v in conv.server.items() if v not in (None, "", [], {})}
    if server:
        meta.append("- server: " + ", ".join(f"{k}={v}" for k, v in sorted(server.items())))
    p = conv.params
    meta.append(f"- sampling: temperature {p.temperature:g}, top_p {p.top_p:g}, max_tokens {p.max_tokens}")
    out += [m for m in meta if m] + [""]
    if p.system_prompt:
        out += ["## System", "", p.system_prompt, ""]
    for t in conv.turns:
        out += [f"## {'You' if t['role'] == 'user' else 'Assistant'}", "", t["content"], ""]
        if t["role"] == "assistant" and reply_line(t):
            out += [f"*{reply_line(t)}*", ""]
    return "\n".join(out).rstrip() + "\n"


CEILING_SLACK = 1.05  # a measured rate this far above the ledger's ceiling cannot be a decode rate


def rate_text(result: ChatResult, ceiling: float | None = None) -> str:
    """"41.3 tok/s (batch-1 ceiling ≤ 63)"; "burst (256 tokens in 2 arrivals)" when no gap between
    tokens could be measured; a rate above the ceiling is marked as not a decode rate."""
    tps = result.tokens_per_s
    if result.burst:
        groups = len(result._groups())
        text = f"burst ({result.tokens} tokens in {groups} arrival{'s' if groups != 1 else ''}: no rate)"
    elif tps:
        text = f"{tps:.1f} tok/s"
    else:
        text = "tok/s n/a"
    if ceiling:
        text += f" (batch-1 ceiling ≤ {ceiling:.0f})"
        if tps and not result.burst and tps > ceiling * CEILING_SLACK:
            text += " ⚠ above the ceiling: not a decode rate"
    return text


def figures_line(result: ChatResult, ceiling: float | None = None) -> str:
    """"TTFT 84 ms · 41.3 tok/s (batch-1 ceiling ≤ 63) · 128 tokens · finish: length (chat.max_tokens)"."""
    parts = [f"TTFT {result.ttft_s * 1000:.0f} ms" if result.ttft_s is not None else "TTFT n/a",
             rate_text(result, ceiling)]
    if result.completion_tokens is not None:
        prompt = f" after {result.prompt_tokens} prompt" if result.prompt_tokens is not None else ""
        parts.append(f"{result.completion_tokens} tokens{prompt}")
    if result.finish_reason:
        hint = " (cut at chat.max_tokens)" if result.finish_reason == "length" else ""
        parts.append(f"finish: {result.finish_reason}{hint}")
    return " · ".join(parts)


def reply_figures(result: ChatResult) -> dict[str, Any]:
    """What a saved reply keeps of its measurement (the text is the turn's content)."""
    out = result.as_dict()
    out.pop("text", None)
    return out


def measured_decode_rate(result: ChatResult | None, ceiling: float | None = None) -> float | None:
    """The reply's decode tok/s for the ledger panel: None for a burst or a rate above the ceiling."""
    tps = result.decode_tokens_per_s if result is not None else None
    if tps is None or (ceiling and tps > ceiling * CEILING_SLACK):
        return None
    return tps

