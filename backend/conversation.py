"""One chat conversation in the console: its turns, the request's messages, the figures line.

Plain data; the console's ChatPane renders it and backend.chat streams each reply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the console's first frame does not need httpx: backend.chat is imported on first use
    from backend.chat import ChatResult


@dataclass
class Conversation:
    system_prompt: str = ""
    turns: list[dict[str, str]] = field(default_factory=list)  # {"role": "user"|"assistant", "content"}

    def messages(self, user_text: str) -> list[dict[str, str]]:
        """What to send for a new user message: system prompt, earlier turns, the new message."""
        head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return head + [dict(t) for t in self.turns] + [{"role": "user", "content": user_text}]

    def record(self, user_text: str, reply: str) -> None:
        """Keep a finished exchange. A failed or empty reply keeps nothing, so a retry resends cleanly."""
        if reply:
            self.turns += [{"role": "user", "content": user_text}, {"role": "assistant", "content": reply}]

    def clear(self) -> None:
        self.turns.clear()

    def last_reply(self) -> str | None:
        return next((t["content"] for t in reversed(self.turns) if t["role"] == "assistant"), None)

    def transcript(self) -> str:
        """The conversation as Markdown (what `copy all` puts on the clipboard)."""
        return "\n\n".join(f"**{t['role']}**: {t['content']}" for t in self.turns)


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


def measured_decode_rate(result: ChatResult | None, ceiling: float | None = None) -> float | None:
    """The reply's decode tok/s for the ledger panel: None for a burst or a rate above the ceiling."""
    tps = result.decode_tokens_per_s if result is not None else None
    if tps is None or (ceiling and tps > ceiling * CEILING_SLACK):
        return None
    return tps
