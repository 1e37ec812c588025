"""The load generator's own CPU per streamed token: qwen-tui bench's requests against vLLM's.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_client_cpu.py [--requests 64] [--concurrency 8]
        [--tokens 128] [--token-ms 5] [--runs 3]

Streams from a FAKE OpenAI-style server (NOT vLLM: benchmarks/bench_sweep_streams.py's raw asyncio
server, in its own process, so its CPU is not counted): N requests, C in flight, each `--tokens`
chunks one every `--token-ms` ms. Measures this process's user+sys CPU over the run for
- `qwen-tui`: backend.bench.loadtest's request function as `qwen-tui bench` runs it (over aiohttp);
- `qwen-tui/httpx`: the same over httpx (stream_chat, the chat's path; the bench's before 2026-12-01);
- `vllm`: `vllm bench serve`'s own request function (aiohttp), when vLLM is installed.
Runs alternate; prints each one's ms of CPU per token, the medians and the ratios to vLLM's. On a
box where client and server share cores, this CPU is taken from the server being measured.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import resource
import socket
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def measure(tool: str, base: str, a: argparse.Namespace) -> tuple[float, int]:
    """(CPU seconds, tokens) of one run of `tool`, its warm-up request not counted."""
    if tool == "vllm":
        import aiohttp
        from vllm.benchmarks.lib.endpoint_request_func import RequestFuncInput, async_request_openai_chat_completions

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=a.concurrency + 4)) as s:
            def inp(i: int) -> RequestFuncInput:
                return RequestFuncInput(prompt=f"Request {i}. hello", api_url=base + "/v1/chat/completions",
                                        prompt_len=10, output_len=a.tokens, model="qwen2.5-14b", ignore_eos=True)

            await async_request_openai_chat_completions(inp(-1), s)
            sem = asyncio.Semaphore(a.concurrency)

            async def one(i: int):  # type: ignore[no-untyped-def]
                async with sem:
                    return await async_request_openai_chat_completions(inp(i), s)

            c0 = cpu()
            res = await asyncio.gather(*(one(i) for i in range(a.requests)))
            return cpu() - c0, sum(r.output_tokens or 0 for r in res)
    import httpx

    from backend.bench.loadtest import aiohttp_send, httpx_send, make_request_fn, run_requests, stream_session
    from backend.httpclient import async_client

    limits = httpx.Limits(max_connections=a.concurrency + 4, max_keepalive_connections=a.concurrency + 4)
    async with async_client(api_key=None, timeout=httpx.Timeout(30.0), limits=limits) as client, \
            stream_session(a.concurrency, None, None) as session:
        send = aiohttp_send(session, base, "qwen2.5-14b") if tool == "qwen-tui" else \
            httpx_send(client, base, "qwen2.5-14b", None)
        one = make_request_fn(send, 2, a.tokens, "x-")
        await one("warm-up")
        c0 = cpu()
        results, _ = await run_requests(one, a.requests, a.concurrency)
        return cpu() - c0, sum(r.output_tokens for r in results)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--token-ms", type=float, default=5.0)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    from bench_sweep_streams import serve

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    server = multiprocessing.Process(target=serve, args=(port, a.tokens, a.token_ms), daemon=True)
    server.start()
    time.sleep(1.0)
    tools = ["qwen-tui", "qwen-tui/httpx"]
    try:
        import vllm.benchmarks.lib.endpoint_request_func  # noqa: F401

        tools.append("vllm")
    except Exception as e:  # noqa: BLE001 - vLLM is an extra
        print(f"vllm bench's request function not importable ({type(e).__name__}): measuring qwen-tui only")
    per_token: dict[str, list[float]] = {t: [] for t in tools}
    try:
        for k in range(a.runs):
            for tool in tools if k % 2 == 0 else tools[::-1]:
                used, tokens = asyncio.run(measure(tool, f"http://127.0.0.1:{port}", a))
                per_token[tool].append(used / max(1, tokens) * 1000)
                print(f"run {k + 1} {tool:15s}: {tokens} tokens, {used:.2f} s CPU, {per_token[tool][-1]:.3f} ms/token")
    finally:
        server.terminate()
    med = {t: statistics.median(v) for t, v in per_token.items()}
    for t, m in med.items():
        ratio = f", {m / med['vllm']:.2f}x vLLM's" if "vllm" in med else ""
        print(f"{t:15s} median {m:.3f} ms CPU per streamed token{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
