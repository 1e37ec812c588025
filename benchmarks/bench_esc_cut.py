"""A cut reply frees the server: from the moment the chat drops a stream (what esc does) to vLLM's
num_requests_running back at 0, read from /metrics. Target: ≤ 1 s (median and worst of the runs).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_esc_cut.py [--base-url URL] [--model NAME] [--n 10] [--json]

Default: the demo server at 127.0.0.1:8019 (start it with `qwen-tui --demo --set server.port=8019
serve --detach --wait 300`). Each run asks for 1,500 tokens with ignore_eos, leaves the stream after
its first text (backend.chat.stream.stream_chat, as the chat pane does on esc), then polls /metrics
every 20 ms. The end-to-end test (tests/e2e/test_conversations_e2e.py) checks that the cut reaches
vLLM through the real console; this measures how fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from backend import metrics  # noqa: E402
from backend.chat.stream import ChatResult, new_client, stream_chat  # noqa: E402

MESSAGES = [{"role": "user", "content": "Tell me a very long story."}]
POLL_S = 0.02


async def one(client: httpx.AsyncClient, base_url: str, model: str, poll: httpx.Client) -> float | None:
    """Seconds from the cut to running == 0; None where the reply ended before its first text."""
    r = ChatResult()
    gen = stream_chat(base_url, model, MESSAGES, max_tokens=1500, temperature=1.0, result=r, client=client,
                      extra={"ignore_eos": True})
    async for delta in gen:
        if delta.text:
            break
    else:
        return None
    await gen.aclose()  # the response closes: vLLM sees the client go and aborts the request
    cut = time.monotonic()
    while time.monotonic() - cut < 30:
        snap = await asyncio.to_thread(metrics.fetch, base_url, 2.0, poll)
        if snap.running == 0:
            return snap.at - cut
        await asyncio.sleep(POLL_S)
    raise RuntimeError("still running 30 s after the cut")


async def run(base_url: str, model: str, n: int) -> dict:
    client, poll = new_client(), httpx.Client(trust_env=False)
    times: list[float] = []
    try:
        while len(times) < n:
            t = await one(client, base_url, model, poll)
            if t is not None:
                times.append(t * 1000)
    finally:
        await client.aclose()
        poll.close()
    return {"n": n, "cut_to_zero_ms_median": round(statistics.median(times), 1),
            "cut_to_zero_ms_max": round(max(times), 1), "target_ms": 1000,
            "met": max(times) <= 1000}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8019")
    p.add_argument("--model", default="qwen-tui-demo")
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    r = asyncio.run(run(a.base_url, a.model, a.n))
    if a.json:
        print(json.dumps(r))
    else:
        print(f"cut to num_requests_running 0 over {r['n']} runs: median {r['cut_to_zero_ms_median']} ms, "
              f"worst {r['cut_to_zero_ms_max']} ms (target ≤ {r['target_ms']} ms: "
              f"{'met' if r['met'] else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
