"""backend.chat.store: conversations saved as they go, read back whole, listed, renamed,
deleted, exported; a damaged line costs that line only."""

from __future__ import annotations

import json
import stat

import pytest

from backend.chat.conversation import ChatParams, Conversation, parse_param, reply_line, to_markdown
from backend.chat.store import Store, StoreError


def _conv(store: Store) -> Conversation:
    conv = Conversation(params=ChatParams("Be brief.", 0.2, 0.9, 64), model="qwen-tui-demo",
                        server={"model": "/m", "max_model_len": 2048})
    store.add_turns(conv, conv.record("first question", "first answer",
                                      figures={"ttft_s": 0.05, "completion_tokens": 12}, line="TTFT 50 ms"))
    store.add_turns(conv, conv.record("second", "partial", line="TTFT 9 ms", cut=True))
    return conv


def test_saved_as_it_goes_and_read_back_whole(qhome):
    store = Store()
    conv = _conv(store)
    path = store.path(conv.id)
    assert path.parent == qhome / "data" / "conversations" and path.suffix == ".jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    records = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["type"] for r in records] == ["meta", "turn", "turn", "turn", "turn"]
    back = store.load(conv.id)
    assert back.title == "first question" and back.model == "qwen-tui-demo"
    assert back.params == ChatParams("Be brief.", 0.2, 0.9, 64)
    assert back.server["max_model_len"] == 2048
    assert [t["content"] for t in back.turns] == ["first question", "first answer", "second", "partial"]
    assert back.turns[1]["figures"]["completion_tokens"] == 12 and back.turns[1]["line"] == "TTFT 50 ms"
    assert back.turns[3]["cut"] is True and "cut by esc" in reply_line(back.turns[3])
    assert back.messages("next")[0] == {"role": "system", "content": "Be brief."}
    assert all(set(m) == {"role", "content"} for m in back.messages("next"))


def test_an_empty_conversation_leaves_no_file(qhome):
    store = Store()
    conv = Conversation()
    store.add_turns(conv, conv.record("hi", ""))  # a failed reply keeps nothing
    assert conv.id == "" and store.list() == []


def test_list_rename_delete_and_resolve(qhome):
    store = Store()
    a = _conv(store)
    b = Conversation(model="other")
    store.add_turns(b, b.record("newer one", "ok"))
    listed = store.list()
    assert [s.id for s in listed] == [b.id, a.id]  # most recent first
    assert (listed[1].title, listed[1].model, listed[1].messages) == ("first question", "qwen-tui-demo", 4)
    store.rename(a.id, "  My   chat ")
    assert store.load(a.id).title == "My chat"
    assert store.resolve("My chat") == a.id and store.resolve("my chat") == a.id
    assert store.resolve(a.id) == a.id and store.resolve("nope") is None
    with pytest.raises(StoreError, match="empty"):
        store.rename(a.id, "   ")
    store.delete(a.id)
    assert [s.id for s in store.list()] == [b.id]
    with pytest.raises(StoreError, match="no conversation"):
        store.delete(a.id)
    with pytest.raises(StoreError, match="no conversation"):
        store.load(a.id)
    with pytest.raises(StoreError, match="not a conversation id"):
        store.path("../etc/passwd")


def test_params_context_and_server_records(qhome):
    store = Store()
    conv = _conv(store)
    conv.params.temperature = 1.3
    store.save_params(conv)
    conv.drop_oldest(1)
    store.save_context(conv)
    store.save_server(conv, "qwen-tui-demo", conv.server)  # unchanged: nothing written
    store.save_server(conv, "bigger", {"model": "/b"})
    back = store.load(conv.id)
    assert back.params.temperature == 1.3 and back.context_start == 2
    assert [m["content"] for m in back.history()] == ["Be brief.", "second", "partial"]
    assert back.model == "bigger" and back.server == {"model": "/b"}
    kinds = [json.loads(x)["type"] for x in store.path(conv.id).read_text().splitlines()]
    assert kinds.count("server") == 1


def test_a_damaged_line_costs_that_line_only(qhome):
    store = Store()
    conv = _conv(store)
    with open(store.path(conv.id), "a") as f:
        f.write('{"type": "turn", "role": "user", "content": "trunc')  # a crash mid-write
    back = store.load(conv.id)
    assert len(back.turns) == 4
    assert store.list()[0].damaged == 1


def test_markdown_export(qhome):
    store = Store()
    conv = _conv(store)
    md = to_markdown(store.load(conv.id))
    assert md.startswith("# first question\n")
    assert "- model: qwen-tui-demo" in md and "max_model_len=2048" in md
    assert "temperature 0.2, top_p 0.9, max_tokens 64" in md
    assert "## System\n\nBe brief." in md
    assert md.index("## You\n\nfirst question") < md.index("## Assistant\n\nfirst answer") < md.index("*TTFT 50 ms*")
    assert "cut by esc" in md


@pytest.mark.parametrize("name,value,want", [("temperature", "0.5", 0.5), ("top_p", 1, 1.0),
                                             ("max_tokens", "128", 128), ("system_prompt", "x", "x")])
def test_parse_param_accepts(name, value, want):
    assert parse_param(name, value) == want


@pytest.mark.parametrize("name,value,why", [("temperature", "3", "out of range"), ("top_p", "0", "out of range"),
                                            ("max_tokens", "1.5", "whole number"), ("max_tokens", "0", "range"),
                                            ("temperature", "warm", "not a number"), ("nope", 1, "unknown")])
def test_parse_param_refuses(name, value, why):
    with pytest.raises(ValueError, match=why):
        parse_param(name, value)


def test_params_from_chat_settings():
    p = ChatParams.from_chat({"max_tokens": 99, "temperature": 0.1, "system_prompt": "s"})
    assert p == ChatParams("s", 0.1, 1.0, 99)
    assert ChatParams.from_dict({"temperature": "hot", "top_p": 0.5}, p) == ChatParams("s", 0.1, 0.5, 99)


def test_drop_oldest_counts_exchanges():
    c = Conversation()
    for i in range(3):
        c.record(f"q{i}", f"a{i}")
    assert c.exchanges_in_context() == 3
    c.drop_oldest(2)
    assert [m["content"] for m in c.history()] == ["q2", "a2"] and c.exchanges_in_context() == 1
