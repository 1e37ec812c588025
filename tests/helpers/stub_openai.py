"""A STUB OpenAI server (stdlib only) that stands in for one vLLM box in the cluster tests.

It answers /health, /v1/models, /v1/chat/completions (streaming and not) and /metrics with
`vllm:num_requests_running` and `vllm:request_success_total`, the two series the cluster reads.
It is not vLLM: replies are fixed words, one chunk per token after `--token-delay` seconds.

Run alone: `python tests/helpers/stub_openai.py --port 8011 --model demo [--box NAME]`. Started by a
real qwen-tui supervisor (through the fake interpreter of tests/helpers/cluster.py), it also prints
vLLM-like figure lines, so the supervisor's status has KV tokens and max concurrency.
In-process: `StubServer(...)` as a context.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _State:
    def __init__(self, model: str, box: str, token_delay: float, tokens: int) -> None:
        self.model, self.box, self.token_delay, self.tokens = model, box, token_delay, tokens
        self.lock = threading.Lock()
        self.running = 0
        self.success = 0
        self.healthy = True
        self.connections: set = set()  # open sockets, closed by stop(): a stopped box answers nothing


def _handler(state: _State):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            with state.lock:
                state.connections.add(self.connection)

        def finish(self):
            try:
                super().finish()
            finally:
                with state.lock:
                    state.connections.discard(self.connection)

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802
            path = self.path.split("?")[0]
            if path == "/health":
                self._send(200 if state.healthy else 503, b"")
            elif path == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [
                    {"id": state.model, "object": "model", "owned_by": "stub"}]}).encode())
            elif path == "/metrics":
                with state.lock:
                    running, success = state.running, state.success
                text = (
                    "# TYPE vllm:num_requests_running gauge\n"
                    f'vllm:num_requests_running{{model_name="{state.model}"}} {running}\n'
                    "# TYPE vllm:num_requests_waiting gauge\n"
                    f'vllm:num_requests_waiting{{model_name="{state.model}"}} 0\n'
                    "# TYPE vllm:request_success_total counter\n"
                    f'vllm:request_success_total{{finished_reason="length",model_name="{state.model}"}} {success}\n'
                )
                self._send(200, text.encode(), "text/plain; version=0.0.4")
            else:
                self._send(404, b'{"error": "not found"}')

        def do_POST(self):  # noqa: N802
            n = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(n) or b"{}")
            except ValueError:
                body = {}
            if self.path.split("?")[0] == "/v1/completions":  # the supervisor's readiness probe, counted as vLLM does
                k = int(body.get("max_tokens") or state.tokens)
                self._send(200, json.dumps({"id": "stub", "object": "text_completion", "model": state.model,
                                            "choices": [{"index": 0, "text": " ".join(["w"] * k)}],
                                            "usage": {"prompt_tokens": 1, "completion_tokens": k}}).encode())
                with state.lock:
                    state.success += 1
                return
            if self.path.split("?")[0] != "/v1/chat/completions":
                self._send(404, b'{"error": "not found"}')
                return
            with state.lock:
                state.running += 1
            try:
                k = int(body.get("max_tokens") or state.tokens)
                prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or [])
                if body.get("stream"):
                    self._stream(k, prompt_tokens, body)
                else:
                    time.sleep(state.token_delay * k)
                    self._send(200, json.dumps({
                        "id": "stub", "object": "chat.completion", "model": state.model, "box": state.box,
                        "choices": [{"index": 0, "finish_reason": "length",
                                     "message": {"role": "assistant", "content": " ".join(["w"] * k)}}],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": k,
                                  "total_tokens": prompt_tokens + k}}).encode())
                with state.lock:
                    state.success += 1
            finally:
                with state.lock:
                    state.running -= 1

        def _stream(self, k: int, prompt_tokens: int, body: dict) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

            def chunk(obj: dict) -> None:
                self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                self.wfile.flush()

            base = {"id": "stub", "object": "chat.completion.chunk", "model": state.model}
            chunk(dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}}]))
            for i in range(k):
                time.sleep(state.token_delay)
                chunk(dict(base, choices=[{"index": 0, "delta": {"content": f"w{i} "}}]))
            chunk(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "length"}]))
            if (body.get("stream_options") or {}).get("include_usage"):
                chunk(dict(base, choices=[], usage={"prompt_tokens": prompt_tokens, "completion_tokens": k,
                                                    "total_tokens": prompt_tokens + k}))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def log_message(self, *a):
            pass

    return Handler


class StubServer:
    """One stub box in this process: `with StubServer(port=0) as s: s.base_url`."""

    def __init__(self, port: int = 0, model: str = "stub-model", box: str = "stub",
                 token_delay: float = 0.0, tokens: int = 4, host: str = "127.0.0.1") -> None:
        self.state = _State(model, box, token_delay, tokens)
        self.httpd = ThreadingHTTPServer((host, port), _handler(self.state))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "StubServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        import socket

        self.httpd.shutdown()
        self.httpd.server_close()
        with self.state.lock:
            conns = list(self.state.connections)
        for c in conns:  # keep-alive connections would go on answering
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> "StubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--model", default="stub-model")
    p.add_argument("--served-model-name", nargs="*")
    p.add_argument("--box", default="stub")
    p.add_argument("--token-delay", type=float, default=0.01)
    args, _ = p.parse_known_args(argv)  # the rest of a `vllm serve` line is ignored
    model = args.served_model_name[0] if args.served_model_name else args.model
    srv = StubServer(args.port, model, args.box, args.token_delay, host=args.host)
    print("INFO stub_openai: not vLLM, a stub for the cluster tests", flush=True)
    print("INFO [kv_cache_utils.py:1] GPU KV cache size: 63,000 tokens", flush=True)
    print("INFO [kv_cache_utils.py:2] Maximum concurrency for 8,192 tokens per request: 7.69x", flush=True)
    print(f"INFO:     Uvicorn running on http://{args.host}:{srv.port} (Press CTRL+C to quit)", flush=True)
    try:
        srv.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
