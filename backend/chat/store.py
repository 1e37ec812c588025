"""Saved conversations: one JSON-lines file per conversation under the XDG data dir.

`<data dir>/conversations/<id>.jsonl`, written as the conversation goes (append only, one record a
line, each a JSON object with a "type"):

- ``meta``: id, title, created, model, server (the settings it ran under, the key hidden), params;
- ``turn``: role, content, at; a reply also has figures, line (shown under it) and cut (esc stopped it);
- ``params``: the per-chat sampling settings, when changed; ``title``: a rename;
- ``context``: start (the first turn still sent, after dropping the oldest to fit max_model_len);
- ``server``: model and server settings, when they differ from the last recorded.

A line that does not parse (a crash while it was written) is skipped and counted, never fatal.
Files are the user's only (0600 in a 0700 dir): conversations are private.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend import paths
from backend.chat.conversation import ChatParams, Conversation
from backend.settings import Settings

SUFFIX = ".jsonl"


class StoreError(Exception):
    """A conversation that cannot be found, read or written, said plainly."""


@dataclass
class Summary:
    id: str
    title: str
    created: float
    updated: float
    model: str
    messages: int
    path: Path
    damaged: int = 0  # lines that did not parse

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "created": self.created, "updated": self.updated,
                "model": self.model, "messages": self.messages, "path": str(self.path),
                "damaged_lines": self.damaged}


def new_id(now: float | None = None) -> str:
    """"20261201-114512-3f9a": sortable by start, unique enough for one user's chats."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(now or time.time())) + "-" + secrets.token_hex(2)


class Store:
    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else paths.data_dir() / "conversations"

    def path(self, conv_id: str) -> Path:
        if not conv_id or "/" in conv_id or conv_id.startswith("."):
            raise StoreError(f"not a conversation id: {conv_id!r}")
        return self.root / f"{conv_id}{SUFFIX}"

    # -- writing --------------------------------------------------------------------------------
    def _append(self, conv_id: str, *records: dict[str, Any]) -> None:
        path = self.path(conv_id)
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                f.write(text)  # one write per call: a record is never split between two calls
        except OSError as e:
            raise StoreError(f"cannot write {path}: {e.strerror or e}") from None

    def create(self, conv: Conversation) -> Conversation:
        """Give `conv` an id (if it has none) and write its first line."""
        conv.id = conv.id or new_id(conv.created)
        self._append(conv.id, {"type": "meta", "v": 1, "id": conv.id, "title": conv.title,
                               "created": conv.created, "model": conv.model, "server": conv.server,
                               "params": conv.params.as_dict()})
        return conv

    def ensure(self, conv: Conversation) -> Conversation:
        """Created on first use: a conversation nobody wrote in leaves no file."""
        if not conv.id or not self.path(conv.id).exists():
            self.create(conv)
        return conv

    def add_turns(self, conv: Conversation, turns: list[dict[str, Any]]) -> None:
        if not turns:
            return
        self.ensure(conv)
        now = time.time()
        self._append(conv.id, *({"type": "turn", "at": now, **t} for t in turns))

    def save_params(self, conv: Conversation) -> None:
        self.ensure(conv)
        self._append(conv.id, {"type": "params", "at": time.time(), "params": conv.params.as_dict()})

    def save_context(self, conv: Conversation) -> None:
        self.ensure(conv)
        self._append(conv.id, {"type": "context", "at": time.time(), "start": conv.context_start})

    def save_server(self, conv: Conversation, model: str, server: dict[str, Any]) -> None:
        """Record the model and server settings when they changed since the last record."""
        if (model, server) == (conv.model, conv.server):
            return
        conv.model, conv.server = model, server
        if conv.id and self.path(conv.id).exists():
            self._append(conv.id, {"type": "server", "at": time.time(), "model": model, "server": server})

    def rename(self, conv_id: str, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            raise StoreError("a title cannot be empty")
        if not self.path(conv_id).exists():
            raise StoreError(f"no conversation {conv_id!r}")
        self._append(conv_id, {"type": "title", "at": time.time(), "title": title})

    def delete(self, conv_id: str) -> None:
        try:
            self.path(conv_id).unlink()
        except FileNotFoundError:
            raise StoreError(f"no conversation {conv_id!r}") from None
        except OSError as e:
            raise StoreError(f"cannot delete {self.path(conv_id)}: {e.strerror or e}") from None

    # -- reading --------------------------------------------------------------------------------
    def load(self, conv_id: str, defaults: ChatParams | None = None) -> Conversation:
        conv, _ = self._read(self.path(conv_id), defaults)
        return conv

    def _read(self, path: Path, defaults: ChatParams | None = None) -> tuple[Conversation, int]:
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            raise StoreError(f"no conversation {path.stem!r} (looked in {self.root})") from None
        except OSError as e:
            raise StoreError(f"cannot read {path}: {e.strerror or e}") from None
        conv = Conversation(params=ChatParams.from_dict(None, defaults), id=path.stem, created=0.0)
        damaged, saw_meta = 0, False
        for raw in lines:
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
                if not isinstance(rec, dict):
                    raise ValueError
                self._apply(conv, rec, defaults)
                saw_meta = saw_meta or rec.get("type") == "meta"
            except (ValueError, TypeError, KeyError, AttributeError):
                damaged += 1
        if not saw_meta or not conv.created:
            try:
                conv.created = path.stat().st_mtime
            except OSError:
                pass
            conv.updated = max(conv.updated, conv.created)
        return conv, damaged

    @staticmethod
    def _apply(conv: Conversation, rec: dict[str, Any], defaults: ChatParams | None) -> None:
        kind = rec.get("type")
        at = rec.get("at")
        if isinstance(at, (int, float)):
            conv.updated = max(conv.updated, float(at))
        if kind == "meta":
            conv.title = str(rec.get("title") or "")
            conv.created = float(rec.get("created") or conv.created)
            conv.updated = max(conv.updated, conv.created)
            conv.model = str(rec.get("model") or "")
            server = rec.get("server")
            conv.server = server if isinstance(server, dict) else {}
            conv.params = ChatParams.from_dict(rec.get("params"), defaults)
        elif kind == "turn":
            role, content = rec["role"], rec["content"]
            if role not in ("user", "assistant") or not isinstance(content, str):
                raise ValueError
            turn = {k: v for k, v in rec.items() if k not in ("type", "at")}
            conv.turns.append(turn)
            if role == "user" and not conv.title:
                from backend.chat.conversation import (
                    default_title,  # start-up: loaded on first use, not with the console
                )

                conv.title = default_title(content)
        elif kind == "params":
            conv.params = ChatParams.from_dict(rec["params"], conv.params)
        elif kind == "title":
            conv.title = str(rec["title"])
        elif kind == "context":
            conv.context_start = max(0, int(rec["start"]))
        elif kind == "server":
            conv.model = str(rec.get("model") or conv.model)
            if isinstance(rec.get("server"), dict):
                conv.server = rec["server"]
        else:
            raise ValueError(kind)

    def list(self) -> list[Summary]:
        """Every saved conversation, the most recently used first."""
        try:
            files = sorted(self.root.glob(f"*{SUFFIX}"))
        except OSError:
            return []
        out = []
        for path in files:
            try:
                conv, damaged = self._read(path)
            except StoreError:
                continue
            out.append(Summary(conv.id, conv.title or "(empty)", conv.created, conv.updated, conv.model,
                               conv.message_count(), path, damaged))
        return sorted(out, key=lambda s: s.updated, reverse=True)

    def resolve(self, name: str) -> str | None:
        """An id from an id, a unique id prefix, or a title (the most recent of that title)."""
        name = name.strip()
        if not name:
            return None
        summaries = self.list()
        ids = [s.id for s in summaries]
        if name in ids:
            return name
        prefixed = [i for i in ids if i.startswith(name)]
        if len(prefixed) == 1:
            return prefixed[0]
        titled = [s.id for s in summaries if s.title == name] or \
                 [s.id for s in summaries if s.title.casefold() == name.casefold()]
        return titled[0] if titled else None


def server_record(settings: Settings, base_url: str = "", model: str = "") -> dict[str, Any]:
    """The server settings a conversation runs under, as saved with it (the API key hidden)."""
    server = settings.snapshot()["server"]
    keep = ("model", "served_model_name", "max_model_len", "tensor_parallel_size", "dtype",
            "gpu_memory_utilization", "kv_cache_dtype", "quantization", "enable_prefix_caching",
            "max_num_seqs", "seed")
    out = {k: server.get(k) for k in keep if server.get(k) not in (None, "", [])}
    if base_url:
        out["base_url"] = base_url
    if model:
        out["served_as"] = model
    if getattr(settings, "demo", False):
        out["demo"] = True
    return out


def exports_dir() -> Path:
    return paths.data_dir() / "exports"


def write_export(path: Path, text: str) -> None:
    """A conversation's Markdown, private as the conversations are: the file 0600, written whole
    (a temp file renamed into place); the exports dir 0700. Raises StoreError."""
    try:
        if path.parent == exports_dir():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if path.parent.stat().st_mode & 0o077:
                path.parent.chmod(0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError as e:
        raise StoreError(f"cannot write {path}: {e.strerror or e}") from None
