"""A FAKE scheduler-like server for the sweep tests (httpx.MockTransport): NOT vLLM."""

from __future__ import annotations

import asyncio
import json

import httpx


class FakeScheduler:
    """NOT vLLM: /v1/models, /tokenize, streaming chat (`delay` s per token), /metrics with
    num_requests_running = min(in flight, seqs), waiting = the rest, KV usage 0.1 per running one."""

    def __init__(self, seqs=4, delay=0.002):
        self.seqs, self.delay, self.in_flight, self.chats = seqs, delay, 0, 0

    def metrics_text(self):
        running = min(self.in_flight, self.seqs)
        return (f"vllm:num_requests_running{{model_name=\"m\"}} {running}\n"
                f"vllm:num_requests_waiting{{model_name=\"m\"}} {self.in_flight - running}\n"
                f"vllm:kv_cache_usage_perc{{model_name=\"m\"}} {running * 0.1}\n"
                f"vllm:num_preemptions_total{{model_name=\"m\"}} 0\n")

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/metrics":
            return httpx.Response(200, text=self.metrics_text())
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "qwen2.5-14b", "max_model_len": 4096}]})
        if path == "/tokenize":
            text = json.loads(request.content)["messages"][0]["content"]
            return httpx.Response(200, json={"count": 10 + len(text.split())})
        n = json.loads(request.content)["max_tokens"]
        fake = self
        fake.chats += 1

        class Stream(httpx.AsyncByteStream):
            async def __aiter__(self):
                fake.in_flight += 1
                try:
                    for _ in range(n):
                        await asyncio.sleep(fake.delay)
                        yield b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
                    yield (b'data: {"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":%d}}\n\n'
                           b"data: [DONE]\n\n" % n)
                finally:
                    fake.in_flight -= 1

        return httpx.Response(200, stream=Stream())
