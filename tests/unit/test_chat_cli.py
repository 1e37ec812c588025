"""`qwen-tui chat` headless: --conversation continues a saved conversation (history sent, turns
saved), --list [--json], --export, --rename, --delete; a request that would not fit is never sent.
Against tests/fault_server.py (a local socket, not vLLM; the real server is in the e2e tier)."""

from __future__ import annotations

import json

from backend.chat.store import Store
from backend.cli import main
from tests.helpers.fault_server import FaultServer


def run(capsys, srv, *args):
    port = srv.base_url.rsplit(":", 1)[1]
    rc = main(["--set", f"server.port={port}", "--set", "server.served_model_name=qwen-tui-demo", "chat", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_conversation_continued_listed_exported_renamed_deleted(qhome, capsys):
    with FaultServer() as srv:
        rc, out, err = run(capsys, srv, "--conversation", "work notes", "first question")
        assert rc == 0, err
        assert out == "Hello there" and "saved in" in err
        rc, out, err = run(capsys, srv, "--conversation", "work notes", "--json", "second")
        assert rc == 0, err
        data = json.loads(out)
        assert data["conversation"]["title"] == "work notes" and data["conversation"]["messages"] == 4
        assert data["context"]["exact"] is True and data["context"]["max_model_len"] == 2048
        sent = srv.bodies[-1]["messages"]
        assert [m["content"] for m in sent[1:]] == ["first question", "Hello there", "second"]
        assert srv.bodies[-1]["top_p"] == 1.0 and srv.bodies[-1]["temperature"] == 0.7
    conv_id = data["conversation"]["id"]
    saved = Store().load(conv_id)
    assert saved.turns[1]["figures"]["text_chunks"] == 2 and "TTFT" in saved.turns[1]["line"]
    assert saved.server["served_model_name"] == "qwen-tui-demo"

    assert main(["chat", "--list"]) == 0
    listing = capsys.readouterr().out
    assert conv_id in listing and "work notes" in listing and "   4  " in listing
    assert main(["chat", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["conversations"]
    assert [(r["id"], r["title"], r["messages"]) for r in rows] == [(conv_id, "work notes", 4)]

    assert main(["chat", "--export", "work notes"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("# work notes") and "## You\n\nfirst question" in md and "## Assistant\n\nHello there" in md
    assert main(["chat", "--rename", conv_id[:15], "renamed"]) == 0
    capsys.readouterr()
    assert Store().load(conv_id).title == "renamed"
    assert main(["chat", "--delete", "renamed"]) == 0
    assert "deleted" in capsys.readouterr().out and Store().list() == []
    assert main(["chat", "--export", "renamed"]) == 1
    assert "no saved conversation 'renamed'" in capsys.readouterr().err


def test_a_request_that_would_not_fit_is_refused_with_the_ways_out(qhome, capsys):
    with FaultServer() as srv:
        srv.httpd.max_model_len = 300
        for q in ("one", "two", "three"):
            assert run(capsys, srv, "--conversation", "long", "--max-tokens", "250", q)[0] == 0
        sent_before = len(srv.bodies)
        rc, out, err = run(capsys, srv, "--conversation", "long", "--max-tokens", "290", "four")
        assert rc == 2 and len(srv.bodies) == sent_before  # bad input: never sent
        assert "> max_model_len 300" in err and "lower --max-tokens to" in err and "--drop-oldest" in err
        rc, out, err = run(capsys, srv, "--conversation", "long", "--max-tokens", "260", "--drop-oldest", "four")
        assert rc == 0, err
        assert "left the oldest" in err
        sent = [m["content"] for m in srv.bodies[-1]["messages"] if m["role"] == "user"]
        assert sent[-1] == "four" and "one" not in sent
    conv = Store().load(Store().resolve("long"))
    assert [t["content"] for t in conv.turns if t["role"] == "user"] == ["one", "two", "three", "four"]
    assert conv.context_start > 0  # kept in the file, no longer sent


def test_bad_input_is_a_message(qhome, capsys):
    assert main(["chat", "--rename", "nope", "x"]) == 1
    assert "no saved conversation 'nope'" in capsys.readouterr().err
    assert main(["chat", "--list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["conversations"] == []
