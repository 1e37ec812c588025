"""Can one qwen-tui process hold >= 256 concurrent streams, and what CPU does the generator use?

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_sweep_streams.py [--levels 64,256] [--tokens 64]
        [--token-ms 20] [--requests-per-level N]

Runs `backend.bench.sweep.run_sweep` (the code `qwen-tui bench --sweep` runs) against a FAKE, fast
OpenAI-style server (NOT vLLM: a raw asyncio HTTP/1.1 server in its own process, so its CPU is not
counted) that streams `--tokens` tokens per request, one every `--token-ms` ms, and serves
/v1/models, /tokenize and /metrics. Prints per level: the most requests in flight the generator
reached, completed/failed, total tok/s against the fake's ideal, and the generator's own CPU
(user+sys of this process over the level's wall time; 100 % = one core busy).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- the FAKE server (its own process) ------------------------------------------------------------
def serve(port: int, tokens: int, token_ms: float) -> None:
    state = {"in_flight": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = next((int(v.split(":", 1)[1]) for v in lines[1:]
                               if v.lower().startswith("content-length:")), 0)
                body = json.loads(await reader.readexactly(length)) if length else {}
                if path == "/v1/chat/completions":
                    await stream(writer, int(body.get("max_tokens") or tokens))
                    continue
                if path == "/v1/models":
                    out = json.dumps({"data": [{"id": "qwen2.5-14b", "max_model_len": 8192}]})
                elif path == "/tokenize":
                    text = body["messages"][0]["content"]
                    out = json.dumps({"count": 10 + len(text.split())})
                elif path == "/metrics":
                    out = (f"vllm:num_requests_running{{model_name=\"m\"}} {state['in_flight']}\n"
                           "vllm:num_requests_waiting{model_name=\"m\"} 0\n"
                           f"vllm:kv_cache_usage_perc{{model_name=\"m\"}} {state['in_flight'] / 1000}\n")
                else:
                    out = "{}"
                data = out.encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(data)).encode() + b"\r\n\r\n" + data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stream(writer: asyncio.StreamWriter, n: int) -> None:
        state["in_flight"] += 1
        try:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

            def chunk(data: bytes) -> bytes:
                return f"{len(data):x}\r\n".encode() + data + b"\r\n"

            for _ in range(n):
                await asyncio.sleep(token_ms / 1000)
                writer.write(chunk(b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'))
                await writer.drain()
            writer.write(chunk(b'data: {"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":%d}}\n\n' % n))
            writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
        finally:
            state["in_flight"] -= 1

    async def main() -> None:
        srv = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
        async with srv:
            await srv.serve_forever()

    asyncio.run(main())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="64,256")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--token-ms", type=float, default=20.0)
    ap.add_argument("--requests-per-level", type=int, default=None, help="default: the level (one wave)")
    args = ap.parse_args()

    os.environ.setdefault("QWEN_TUI_HOME", f"/tmp/qwen-tui-bench-streams-{os.getpid()}")
    from backend.bench import sweep
    from backend.settings import load

    port = free_port()
    proc = multiprocessing.Process(target=serve, args=(port, args.tokens, args.token_ms), daemon=True)
    proc.start()
    time.sleep(0.5)
    try:
        settings = load(overrides=[f"server.port={port}", "server.served_model_name=qwen2.5-14b"])
        levels = sweep.parse_levels(args.levels)
        peak: dict[int, int] = {}
        cpu_at: dict[int, tuple[float, float]] = {}
        stats: dict[int, tuple[float, float]] = {}

        def cpu() -> float:
            r = resource.getrusage(resource.RUSAGE_SELF)
            return r.ru_utime + r.ru_stime

        def on_event(ev) -> None:
            if isinstance(ev, sweep.LevelProgress):
                peak[ev.concurrency] = max(peak.get(ev.concurrency, 0), ev.in_flight)
                if ev.done == 0 and ev.in_flight == 1 and ev.concurrency not in cpu_at:
                    cpu_at[ev.concurrency] = (cpu(), time.perf_counter())
            elif isinstance(ev, dict):
                c0, t0 = cpu_at.get(ev["concurrency"], (cpu(), time.perf_counter()))
                stats[ev["concurrency"]] = (cpu() - c0, time.perf_counter() - t0)

        import psutil

        fake_before = sum(psutil.Process(proc.pid).cpu_times()[:2])
        for lv in levels:
            cfg = sweep.SweepConfig([lv], input_tokens=20, output_tokens=args.tokens,
                                    requests_per_level=args.requests_per_level or lv)
            res = asyncio.run(sweep.run_sweep(settings, cfg, on_event))
            row = res["levels"][0]
            used, wall = stats.get(lv, (0.0, 0.0))
            fake_cpu = sum(psutil.Process(proc.pid).cpu_times()[:2])
            fake_used, fake_before = fake_cpu - fake_before, fake_cpu
            ideal = lv * 1000 / args.token_ms
            print(f"concurrency {lv:>4}: peak in flight {peak.get(lv, 0):>4}, completed {row['completed']}/"
                  f"{row['requests']}, failed {row['failed']}, total {row['output_tokens_per_s'] or 0:,.0f} tok/s "
                  f"(fake's ideal {ideal:,.0f}), TTFT mean {row['ttft_ms']['mean'] or 0:.0f} ms, "
                  f"server saw {row['peak_running']} running; generator CPU {used:.2f} s over {wall:.2f} s "
                  f"= {100 * used / wall if wall else 0:.0f} % of a core (the fake server: {fake_used:.2f} s)")
            if row["errors"]:
                print("   errors:", row["errors"][:2])
        print(f"(uptime: {open('/proc/loadavg').read().strip()})")
    finally:
        proc.terminate()
        proc.join(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
