"""Streaming a long Markdown reply into the real chat pane: does the keyboard stay responsive?

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_render.py [--rate 200 --rate 1000] [--tokens 4000] [--json]

A FAKE server (a thread on loopback, NOT vLLM) streams a scripted Markdown reply (headings, lists,
code blocks, tables) as SSE chunks of one token each at a fixed rate. The real console (make_app,
MainScreen, ChatPane, its HTTP client and stream parser) runs headless at 120x40 and asks for it. A
second thread presses keys into the chat input every 50 ms (20 keys/s) the way Textual's terminal driver does
(App.post_message from its input thread), and a task in the event loop measures how late a 5 ms
sleep wakes up.

Figures per rate: loop_lag_ms_p99 (lateness of the 5 ms ticks), key_latency_ms_p99 (key posted →
the chat input changed), stall_share (share of the stream's time that the loop was blocked for more
than 10 ms at a stretch), text_equal (the reply shown, and the one kept in the conversation, are the
scripted text exactly), render_equal (what the finished reply draws is, line for line, Rich's one-shot
Markdown render of the scripted text). Target at 1,000 tok/s: both p99 ≤ 50 ms, text_equal true.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def scripted_reply(tokens: int) -> list[str]:
    """About `tokens` tokens of Markdown: sections with a paragraph, a list, a code block, a table."""
    parts, k = [], 0
    while True:
        k += 1
        section = (f"## Section {k}: measuring the server\n\n"
                   f"The server answers **{k * 7} requests** at once; the *KV cache* holds the rest. "
                   "Each request keeps its own blocks, and `max_num_seqs` caps the batch.\n\n"
                   f"- first point {k}: the prefill runs once per prompt\n"
                   f"- second point {k}: decode steps share the batch\n"
                   "  - nested detail with `inline code`\n"
                   f"1. step one of {k}\n2. step two\n\n"
                   "```python\n"
                   f"def handler_{k}(request):\n"
                   "    tokens = tokenize(request.prompt)\n"
                   "    for step in range(request.max_tokens):\n"
                   "        yield decode(step, tokens)\n"
                   "```\n\n"
                   "| figure | plan | log |\n|---|---:|---:|\n"
                   f"| KV tokens | {k * 1000:,} | {k * 998:,} |\n| concurrency | {k}.5x | {k}.4x |\n\n")
        parts.append(section)
        text = "".join(parts)
        pieces = re.findall(r"\s*\S{1,4}|\s+", text)
        if len(pieces) >= tokens:
            return pieces[:tokens]


class FakeServer(ThreadingHTTPServer):
    """NOT vLLM: streams `pieces` as chat.completion.chunk SSE at `rate` tokens/s."""

    daemon_threads = True

    def __init__(self, pieces: list[str], rate: float) -> None:
        self.pieces, self.rate = pieces, rate
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        srv: FakeServer = self.server  # type: ignore[assignment]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def send(obj: dict | str) -> None:
            data = f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
              "usage": {"prompt_tokens": 10, "completion_tokens": 0}})
        start = time.perf_counter()
        for i, piece in enumerate(srv.pieces, 1):
            delay = start + i / srv.rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            finish = "length" if i == len(srv.pieces) else None
            send({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": finish}],
                  "usage": {"prompt_tokens": 10, "completion_tokens": i}})
        send("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def percentile(xs: list[float], q: float) -> float | None:
    from backend.bench.summary import percentile as p

    return p(xs, q)


async def measure(rate: float, n_tokens: int, key_interval: float = 0.05) -> dict:
    from textual import events
    from textual.widgets import Input

    from backend.server.client import Poll
    from backend.settings import load
    from tui.app import make_app
    from tui.widgets.chat_pane import ChatPane
    from tui.widgets.reply import ReplyView

    pieces = scripted_reply(n_tokens)
    text = "".join(pieces)
    server = FakeServer(pieces, rate)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = load(overrides=[f"server.port={server.server_address[1]}", f"chat.max_tokens={n_tokens}",
                               "chat.system_prompt="])

    ready = {"state": "ready", "base_url": settings.base_url, "served_model_name": settings.served_name,
             "uptime_s": 60.0}

    class ReadyClient:  # FAKE supervisor client: the fake server, READY (its /metrics answers 501)
        def poll(self) -> Poll:
            return Poll(state=dict(ready))

    app = make_app(settings, ReadyClient(), None, freeze_gc=True)  # as the CLI runs it
    key_sent: list[float] = []
    key_lat: list[float] = []
    lags: list[tuple[float, float]] = []  # (time, lateness)
    typed = []

    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("c")
        pane = app.screen.query_one(ChatPane)  # made on the chat's first showing
        await pilot.pause(1.5)  # a person starts typing later than this; the chat's imports are done by then
        box = app.screen.query_one("#chat-input", Input)

        def changed(event: Input.Changed) -> None:
            if event.input is box and key_sent and len(event.value) > len(typed):
                typed.append(event.value[-1])
                key_lat.append(time.perf_counter() - key_sent[len(typed) - 1])

        box.watch(box, "value", lambda value: changed(Input.Changed(box, value)), init=False)  # as it changes
        await pilot.press(*"question")
        loop_done = asyncio.Event()

        async def ticker() -> None:
            while not loop_done.is_set():
                t = time.perf_counter()
                await asyncio.sleep(0.005)
                lags.append((t, time.perf_counter() - t - 0.005))

        stop_keys = threading.Event()

        def keys() -> None:  # the terminal driver's input thread
            letters = "ahijkmnoptuvwyz"  # none of them a console key
            k = 0
            while not stop_keys.is_set():
                ch = letters[k % len(letters)]
                key_sent.append(time.perf_counter())
                app.post_message(events.Key(ch, ch))
                k += 1
                time.sleep(key_interval)

        tick = asyncio.create_task(ticker())
        t0 = time.perf_counter()
        await pilot.press("enter")  # the stream starts now
        assert pane.streaming or pane.conversation.last_reply(), "the question was not sent"
        kt = threading.Thread(target=keys, daemon=True)
        kt.start()
        while pane.streaming:
            await asyncio.sleep(0.05)
        stream_s = time.perf_counter() - t0
        stop_keys.set()
        kt.join()
        await asyncio.sleep(0.3)  # the last keys land
        loop_done.set()
        await tick
        replies = list(pane.query(ReplyView))
        shown = replies[-1].source if replies else ""
        segments = len(replies[-1].segments) + 1 if replies else 0
        renders = replies[-1].renders if replies else 0
        kept = pane.conversation.last_reply()
        drawn = _final_lines(replies[-1]) if replies else None
        render_equal = bool(drawn) and drawn == _one_shot(text, drawn_width(replies[-1]))
    server.shutdown()
    lateness = [x for _, x in lags]
    worst_at = max(lags, key=lambda tx: tx[1])[0] - t0 if lags else None
    stalls = sum(x for x in lateness if x > 0.010)
    return {"rate_tok_s": rate, "key_interval_s": key_interval, "tokens": len(pieces), "stream_s": round(stream_s, 2),
            "loop_lag_ms_p99": _ms(percentile(lateness, 99)), "loop_lag_ms_max": _ms(max(lateness, default=None)),
            "worst_lag_at_s": None if worst_at is None else round(worst_at, 2),
            "key_latency_ms_p50": _ms(percentile(key_lat, 50)), "key_latency_ms_p99": _ms(percentile(key_lat, 99)),
            "keys_sent": len(key_sent), "keys_landed": len(key_lat),
            "stall_share": round(stalls / stream_s, 3) if stream_s else None,
            "text_equal": shown == text and kept == text,
            "render_equal": render_equal,
            "segments": segments, "renders": renders}


def drawn_width(reply) -> int:
    return reply.children[0].content_size.width if reply.children else 0


def _final_lines(reply) -> list[str]:
    """What the finished reply draws, line by line (one MarkdownSegment once it finished)."""
    seg = reply.children[0] if len(reply.children) == 1 else None
    if seg is None:
        return []
    width = seg.content_size.width
    return [seg.render_line(y).text.rstrip() for y in range(seg.get_content_height(None, None, width))]


def _one_shot(text: str, width: int) -> list[str]:
    """Rich's own render of the whole reply at once, as plain lines: what the final render must be."""
    from rich.console import Console
    from rich.markdown import Markdown
    from textual.strip import Strip

    console = Console(width=width, force_terminal=True, color_system="truecolor")
    return [Strip(line).text.rstrip() for line in console.render_lines(Markdown(text), console.options, pad=False)]


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rate", type=float, action="append", help="tokens/s (repeatable; default 200 and 1000)")
    p.add_argument("--tokens", type=int, default=4000)
    p.add_argument("--json", action="store_true", help="print one JSON object per rate")
    p.add_argument("--key-interval", type=float, default=0.05,
                   help="seconds between keys (default 0.05: 20 keys/s, twice a fast typist)")
    p.add_argument("--profile", action="store_true", help="print a cProfile of each run to stderr")
    a = p.parse_args()
    for rate in a.rate or [200.0, 1000.0]:
        if a.profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            r = prof.runcall(asyncio.run, measure(rate, a.tokens, a.key_interval))
            pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
        else:
            r = asyncio.run(measure(rate, a.tokens, a.key_interval))
        if a.json:
            print(json.dumps(r))
        else:
            print(f"{r['rate_tok_s']:.0f} tok/s, {r['tokens']} tokens in {r['stream_s']} s: loop lag p99 "
                  f"{r['loop_lag_ms_p99']} ms (max {r['loop_lag_ms_max']}), key latency p99 "
                  f"{r['key_latency_ms_p99']} ms ({r['keys_landed']}/{r['keys_sent']} keys), stalls "
                  f"{r['stall_share'] * 100:.1f} % of the stream, text equal: {r['text_equal']}, "
                  f"final render = one-shot: {r['render_equal']}, "
                  f"{r['segments']} segments, {r['renders']} renders")
    return 0


if __name__ == "__main__":
    sys.exit(main())
