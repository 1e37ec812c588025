"""A fake Hugging Face hub mirror (what HF_ENDPOINT points at), for tests only: a real HTTP server on
127.0.0.1 that serves model folders the way the hub and its mirrors do, with just the endpoints the
`huggingface_hub` client calls for a download (read from huggingface_hub 2.4's source):

- GET  /api/models/{org}/{name}[/revision/{rev}][?blobs=true]  (HfApi.model_info / repo_info): the
  commit `sha` and `siblings` [{rfilename, size, blobId, lfs: {size, sha256, pointerSize}}];
  404 with `X-Error-Code: RepoNotFound` / `RevisionNotFound` as the hub answers;
- HEAD /{org}/{name}/resolve/{rev}/{file}  (get_hf_file_metadata): ETag, X-Repo-Commit, and for LFS
  files (here: *.safetensors) X-Linked-Etag (the sha256) and X-Linked-Size;
- GET  /{org}/{name}/resolve/{rev}/{file} with `Range: bytes=N-` (http_get's resume): 206 with
  Content-Range, 200 without a range; `EntryNotFound` for a file it does not have.

Faults, for the tests: `cuts[file] = [offset, ...]` drops the connection once at each absolute offset
of that file; `rate_bps` throttles every body; `ignore_range` answers 200 to range requests. It counts
what it sent (`sent[file]`, body bytes) and logs each request (`log`).

`make_sharded_model(dest, shards)` writes the demo model (backend/demo.py: a tiny random Qwen2) split
into several safetensors shards with a `model.safetensors.index.json`, as real checkpoints are.

Run by hand: `python tests/helpers/hub_mirror.py --port 8765` serves Qwen/Qwen2.5-Demo-Sharded, then
`HF_ENDPOINT=http://127.0.0.1:8765 qwen-tui pull Qwen/Qwen2.5-Demo-Sharded`.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"
DEMO_REPO = "Qwen/Qwen2.5-Demo-Sharded"
CHUNK = 16 * 1024


def _is_lfs(rel: str) -> bool:
    return rel.endswith((".safetensors", ".bin"))


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, folder: Path, commit: str = COMMIT, tags: tuple[str, ...] = ("main",)) -> None:
        self.folder, self.commit, self.revisions = Path(folder), commit, set(tags) | {commit}
        self.files: dict[str, dict] = {}
        for p in sorted(self.folder.rglob("*")):
            if p.is_file() and ".cache" not in p.relative_to(self.folder).parts:
                rel = p.relative_to(self.folder).as_posix()
                data = p.read_bytes()
                entry = {"size": len(data), "blob": _git_blob_sha1(data) if not _is_lfs(rel) else
                         hashlib.sha1(data).hexdigest()}
                if _is_lfs(rel):
                    entry["sha256"] = hashlib.sha256(data).hexdigest()
                self.files[rel] = entry

    def siblings(self, blobs: bool) -> list[dict]:
        out = []
        for rel, e in self.files.items():
            s: dict = {"rfilename": rel}
            if blobs:
                s.update(size=e["size"], blobId=e["blob"])
                if "sha256" in e:
                    s["lfs"] = {"size": e["size"], "sha256": e["sha256"], "pointerSize": 134}
            out.append(s)
        return out


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "HubMirror"

    def log_message(self, fmt, *args) -> None:  # quiet
        pass

    def _error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self._serve()

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve()

    def _serve(self) -> None:
        with self.server._lock:
            self.server.active += 1
        try:
            self._route()
        finally:
            with self.server._lock:
                self.server.active -= 1

    def _route(self) -> None:
        url = urlparse(self.path)
        path = unquote(url.path)
        self.server.log.append((self.command, path, self.headers.get("Range")))
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
        if m:
            return self._info(m[1], m[2] or "main", parse_qs(url.query))
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            return self._resolve(m[1], m[2], m[3])
        self._error(404, "NotFound", f"no route {path}")

    def _repo(self, repo_id: str, rev: str) -> Repo | None:
        repo = self.server.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        if rev not in repo.revisions:
            self._error(404, "RevisionNotFound", "Invalid rev id: " + rev)
            return None
        return repo

    def _info(self, repo_id: str, rev: str, query: dict) -> None:
        repo = self._repo(repo_id, rev)
        if repo is None:
            return
        blobs = (query.get("blobs") or ["false"])[0].lower() == "true"
        body = json.dumps({"_id": "x", "id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False,
                           "gated": False, "disabled": False, "tags": [], "siblings": repo.siblings(blobs)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _resolve(self, repo_id: str, rev: str, rel: str) -> None:
        repo = self._repo(repo_id, rev)
        if repo is None:
            return
        entry = repo.files.get(rel)
        if entry is None:
            return self._error(404, "EntryNotFound", f"{rel} does not exist on \"{rev}\"")
        self._send_body(repo, rel, entry)

    def _send_body(self, repo: "Repo", rel: str, entry: dict) -> None:
        """HEAD or GET of one file, with Range (206) and the faults (cuts, rate)."""
        size = entry["size"]
        start = 0
        rng = self.headers.get("Range")
        if rng and not self.server.ignore_range:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
            start = int(m[1]) if m else 0
        end = size  # exclusive
        partial = bool(rng) and not self.server.ignore_range
        if partial and start >= size:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(206 if partial else 200)
        etag = entry.get("sha256") or entry["blob"]
        self.send_header("ETag", f'"{entry["blob"]}"')
        if "sha256" in entry:
            self.send_header("X-Linked-Etag", f'"{etag}"')
            self.send_header("X-Linked-Size", str(size))
        self.send_header("X-Repo-Commit", repo.commit)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start))
        if partial:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        with open(repo.folder / rel, "rb") as f:
            f.seek(start)
            pos = start
            while pos < end:
                cut = self.server.next_cut(rel, pos, end)
                n = min(CHUNK, end - pos, (cut - pos) if cut is not None else CHUNK)
                if n <= 0:  # drop the connection here, mid-body
                    self.server.used_cut(rel, cut)
                    self.close_connection = True
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                data = f.read(n)
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    return
                self.server.count(rel, len(data))
                pos += len(data)
                if self.server.rate_bps:
                    time.sleep(len(data) / self.server.rate_bps)


class HubMirror(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, repos: dict[str, Repo] | None = None, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.repos: dict[str, Repo] = dict(repos or {})
        self.cuts: dict[str, list[int]] = {}
        self.rate_bps: float = 0
        self.ignore_range = False
        self.sent: dict[str, int] = {}
        self.log: list[tuple[str, str, str | None]] = []
        self.active = 0  # requests being answered
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def add(self, repo_id: str, folder: Path, **kw) -> Repo:
        self.repos[repo_id] = Repo(folder, **kw)
        return self.repos[repo_id]

    def next_cut(self, rel: str, pos: int, end: int) -> int | None:
        with self._lock:
            ahead = [c for c in self.cuts.get(rel, []) if pos <= c < end]
        return min(ahead) if ahead else None

    def used_cut(self, rel: str, cut: int) -> None:
        with self._lock:
            self.cuts[rel].remove(cut)

    def count(self, rel: str, n: int) -> None:
        with self._lock:
            self.sent[rel] = self.sent.get(rel, 0) + n

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Until no request is being answered (a client that went away: its handler sees it soon)."""
        deadline = time.time() + timeout
        while self.active and time.time() < deadline:
            time.sleep(0.02)

    @property
    def bytes_sent(self) -> int:
        with self._lock:
            return sum(self.sent.values())

    def start(self) -> "HubMirror":
        self._thread = threading.Thread(target=self.serve_forever, daemon=True, name="hub-mirror")
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


# -- the demo model, sharded like a real checkpoint ---------------------------------------------------
def make_sharded_model(dest: Path, shards: int = 3) -> Path:
    """The demo model (backend/demo.py) with its weights split into `shards` safetensors files and a
    model.safetensors.index.json; a README and .gitattributes as a repo has them."""
    from backend import demo

    with tempfile.TemporaryDirectory() as tmp:
        return shard_folder(demo.generate(Path(tmp) / "m"), dest, shards)


def shard_folder(src: Path, dest: Path, shards: int) -> Path:
    """A model folder with one model.safetensors, copied to dest with its weights in `shards` files."""
    dest = Path(dest)
    blob = (src / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    tensors = [(k, v) for k, v in header.items() if k != "__metadata__"]
    total = sum(v["data_offsets"][1] - v["data_offsets"][0] for _, v in tensors)
    groups: list[list[tuple[str, dict]]] = [[] for _ in range(shards)]
    acc = 0
    for name, info in tensors:
        nbytes = info["data_offsets"][1] - info["data_offsets"][0]
        groups[min(shards - 1, acc * shards // total)].append((name, info))
        acc += nbytes
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name != "model.safetensors":
            (dest / f.name).write_bytes(f.read_bytes())
    weight_map = {}
    for i, group in enumerate(groups, 1):
        fname = f"model-{i:05d}-of-{shards:05d}.safetensors"
        head: dict = {"__metadata__": {"format": "pt"}}
        datas, off = [], 0
        for name, info in group:
            a, b = info["data_offsets"]
            datas.append(blob[base + a: base + b])
            head[name] = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [off, off + b - a]}
            off += b - a
            weight_map[name] = fname
        raw = json.dumps(head, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        with open(dest / fname, "wb") as out:
            out.write(struct.pack("<Q", len(raw)) + raw + b"".join(datas))
    (dest / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    (dest / "README.md").write_text("# Qwen2.5-Demo-Sharded\n\nA tiny random-weight Qwen2 model for tests.\n")
    (dest / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    return dest


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--folder", help="serve this folder (default: the sharded demo model, made in a temp dir)")
    p.add_argument("--repo", default=DEMO_REPO)
    p.add_argument("--rate", type=float, default=0, help="bytes/s for every body (0: unthrottled)")
    args = p.parse_args(argv)
    folder = Path(args.folder) if args.folder else make_sharded_model(Path(tempfile.mkdtemp()) / "repo", 4)
    mirror = HubMirror(port=args.port)
    mirror.add(args.repo, folder)
    mirror.rate_bps = args.rate
    print(f"serving {args.repo} from {folder} at {mirror.url} (HF_ENDPOINT={mirror.url})", flush=True)
    try:
        mirror.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main())
