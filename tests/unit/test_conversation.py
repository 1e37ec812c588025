"""backend.chat.conversation: what is sent, what is kept, and the figures line under a reply."""

from __future__ import annotations

from backend.chat.conversation import Conversation, figures_line
from backend.chat.stream import ChatResult


def test_messages_carry_the_system_prompt_and_history() -> None:
    c = Conversation("Be brief.")
    assert c.messages("hi") == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    c.record("hi", "hello")
    sent = c.messages("and?")
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[-1]["content"] == "and?" and c.last_reply() == "hello"
    assert Conversation("").messages("x") == [{"role": "user", "content": "x"}]


def test_a_failed_reply_keeps_nothing_and_clear_forgets() -> None:
    c = Conversation()
    c.record("hi", "")
    assert c.turns == [] and c.last_reply() is None
    c.record("a", "b")
    assert c.transcript() == "**user**: a\n\n**assistant**: b"
    c.clear()
    assert c.turns == []


def test_figures_line() -> None:
    r = ChatResult(completion_tokens=65, prompt_tokens=20, ttft_s=0.084, total_s=1.684, finish_reason="length")
    line = figures_line(r, 63.3)
    assert line == ("TTFT 84 ms · 40.0 tok/s (batch-1 ceiling ≤ 63) · 65 tokens after 20 prompt"
                    " · finish: length (cut at chat.max_tokens)")
    assert r.tokens_per_s == 40.0
    assert figures_line(ChatResult()) == "TTFT n/a · tok/s n/a"
