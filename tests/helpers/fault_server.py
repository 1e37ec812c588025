"""A fault-injecting local OpenAI-style chat server (for tests only, not vLLM): a real socket on
127.0.0.1 whose next replies are scripted: "ok" (the chunks of `httpd.reply`), "cut" (connection
dropped mid-stream), "drop" (closed before any status line), "malformed" (a chunk that is not JSON),
"slow" (a chunk every 50 ms until the client closes), or an HTTP status (400, 404, 500) with vLLM's
error body. POST /tokenize counts like vLLM's (5 tokens a message plus one a word;
`httpd.max_model_len`) and is not scripted."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ERRORS = {
    400: "This model's maximum context length is 64 tokens. However, you requested 600 tokens "
         "(88 in the messages, 512 in the completion). Please reduce the length of the messages or completion.",
    404: "The model `wrong-name` does not exist. Valid aliases: qwen-tui-demo.",
    500: "Internal Server Error",
}


def _chunk(text: str, usage: dict | None = None) -> bytes:
    chunk: dict = {"choices": [{"delta": {"content": text}}]}
    if usage is not None:  # vLLM's continuous_usage_stats: the counts so far on every chunk
        chunk["usage"] = usage
    data = f"data: {json.dumps(chunk)}\n\n".encode()
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/tokenize":  # like vLLM's: here 5 tokens per message plus one per word
            self.server.tokenized.append(body)
            count = sum(5 + len(str(m.get("content", "")).split()) for m in body.get("messages", []))
            out = json.dumps({"count": count, "max_model_len": self.server.max_model_len, "tokens": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        self.server.bodies.append(body)
        mode = self.server.script.pop(0) if self.server.script else "ok"
        if mode == "drop":  # closed before any status line, as a kept-alive connection the server timed out
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if isinstance(mode, int):
            body = json.dumps({"error": {"message": ERRORS[mode], "type": "BadRequestError", "code": mode}}).encode()
            self.send_response(mode)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if mode == "slow":  # one chunk every 50 ms until the client goes away (or 40 s)
            for i in range(800):
                try:
                    prompt = sum(5 + len(str(m.get("content", "")).split()) for m in body.get("messages", []))
                    self.wfile.write(_chunk(f"word{i} ", {"prompt_tokens": prompt, "completion_tokens": i + 1}))
                    self.wfile.flush()
                except OSError:
                    self.server.disconnects.append(i)
                    return
                time.sleep(0.05)
        for piece in self.server.reply:
            self.wfile.write(_chunk(piece))
        self.wfile.flush()
        if mode == "cut":
            self.connection.shutdown(socket.SHUT_RDWR)  # mid-stream, no terminating chunk
            self.close_connection = True
            return
        if mode == "malformed":
            bad = b"data: {not json\n\n"
            self.wfile.write(f"{len(bad):x}\r\n".encode() + bad + b"\r\n")
        done = b"data: [DONE]\n\n"
        self.wfile.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")
        self.wfile.flush()

    def log_message(self, *a):
        pass


class FaultServer:
    """`with FaultServer() as srv: srv.script = ["ok", "cut", 500]`; `srv.base_url`, `srv.bodies`."""

    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.script, self.httpd.bodies, self.httpd.tokenized = [], [], []
        self.httpd.max_model_len = 2048
        self.httpd.reply = ["Hello", " there"]  # the chunks of an "ok" reply
        self.httpd.disconnects = []  # "slow" replies the client closed: chunks sent before
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def script(self) -> list:
        return self.httpd.script

    @script.setter
    def script(self, value: list) -> None:
        self.httpd.script[:] = value

    @property
    def bodies(self) -> list:
        return self.httpd.bodies

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "FaultServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


if __name__ == "__main__":  # its own process, for a test that stops it (SIGSTOP) or kills it
    with FaultServer() as srv:
        print(srv.base_url, flush=True)
        srv.thread.join()
