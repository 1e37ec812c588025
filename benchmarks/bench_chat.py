"""Chat client overhead: time to first token as qwen-tui's chat measures it (backend.chat.stream.stream_chat
on the client the chat tab keeps) against a bare httpx stream on the same server, alternating.
Target: qwen-tui ≤ +5 ms.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_chat.py [--base-url URL] [--model NAME] [--n 30] [--json]

Default: the demo server at 127.0.0.1:8019 (start it with `qwen-tui --demo --set server.port=8019
serve --detach --wait 300`). Both sides send the same body (continuous usage on, 16 tokens) and
stop the clock at the first chunk with a choice; the bare side also keeps one client, so what is
compared is the parsing and bookkeeping of backend.chat.stream. Also reports what a new client per request
would add (its construction, timed before the send as the chat once did).
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

from backend.chat.stream import ChatResult, chat_body, new_client, stream_chat  # noqa: E402

MESSAGES = [{"role": "user", "content": "Say hello in five words."}]


async def bare(client: httpx.AsyncClient, url: str, body: dict) -> float:
    start, ttft = time.perf_counter(), None
    async with client.stream("POST", url, json=body) as resp:
        async for line in resp.aiter_lines():
            if ttft is None and line.startswith("data:") and '"choices":[{' in line:
                ttft = time.perf_counter() - start
    if ttft is None:
        raise RuntimeError("no chunk with a choice")
    return ttft


async def ours(client: httpx.AsyncClient, base_url: str, model: str) -> float:
    r = ChatResult()
    async for _ in stream_chat(base_url, model, MESSAGES, max_tokens=16, temperature=0.0, result=r,
                               client=client):
        pass
    return r.ttft_s


async def run(base_url: str, model: str, n: int) -> dict:
    body = chat_body(model, MESSAGES, 16, 0.0)
    url = base_url.rstrip("/") + "/v1/chat/completions"
    raw_client = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(30.0))
    our_client = new_client()
    a, b = [], []
    for i in range(n + 2):
        for side in ((0, 1) if i % 2 == 0 else (1, 0)):
            t = await (bare(raw_client, url, body) if side == 0 else ours(our_client, base_url, model))
            if i >= 2:  # the first two pairs warm connections and the server
                (a if side == 0 else b).append(t * 1000)
    t = time.perf_counter()
    for _ in range(5):
        await httpx.AsyncClient(trust_env=False).aclose()
    per_new_client = (time.perf_counter() - t) / 5 * 1000
    await raw_client.aclose()
    await our_client.aclose()
    med_a, med_b = statistics.median(a), statistics.median(b)
    return {"n": n, "bare_httpx_ttft_ms_median": round(med_a, 2), "qwen_tui_ttft_ms_median": round(med_b, 2),
            "overhead_ms": round(med_b - med_a, 2),
            "paired_overhead_ms_median": round(statistics.median(y - x for x, y in zip(a, b, strict=False)), 2),
            "new_httpx_client_ms": round(per_new_client, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8019")
    p.add_argument("--model", default="qwen-tui-demo")
    p.add_argument("--n", type=int, default=30)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    r = asyncio.run(run(a.base_url, a.model, a.n))
    if a.json:
        print(json.dumps(r))
    else:
        print(f"TTFT median over {r['n']} pairs: bare httpx {r['bare_httpx_ttft_ms_median']} ms, qwen-tui chat "
              f"{r['qwen_tui_ttft_ms_median']} ms: overhead {r['overhead_ms']:+} ms (paired median "
              f"{r['paired_overhead_ms_median']:+} ms); a new httpx client per request would add "
              f"{r['new_httpx_client_ms']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
