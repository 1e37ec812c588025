"""What a pull is made of (the files a source lists) and how far it is (per file and overall).

`Tracker` is fed by the download threads (bytes written, a file started or finished) and read by
whoever shows progress: `snapshot()` is a plain JSON-able dict, the same one the pull's state file
carries to a console. The rate is the bytes received over the network in the last RATE_WINDOW_S
seconds (bytes already on disk from an earlier run never count as speed); ETA = bytes still
missing / that rate.
"""

from __future__ import annotations

import errno
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

RATE_WINDOW_S = 5.0


class PullError(Exception):
    """A pull cannot go on; the message is for the user (numbers, the fix)."""

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.message, self.kind = message, kind


class Cancelled(PullError):
    def __init__(self, message: str = "cancelled") -> None:
        super().__init__(message, "cancelled")


@dataclass(frozen=True)
class RemoteFile:
    path: str  # relative, "/"-separated
    size: int | None
    sha256: str | None = None  # LFS / ModelScope content hash, when the source lists it


@dataclass
class Listing:
    source: str  # "hf" | "modelscope"
    endpoint: str
    repo_id: str
    revision: str  # as asked ("main", a tag, a commit)
    commit: str | None  # what it resolved to
    files: list[RemoteFile]
    skipped: list[str] = field(default_factory=list)  # listed but not needed (*.bin beside safetensors ...)

    @property
    def total_bytes(self) -> int:
        return sum(f.size or 0 for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "endpoint": self.endpoint, "repo_id": self.repo_id,
                "revision": self.revision, "commit": self.commit, "total_bytes": self.total_bytes,
                "files": [asdict(f) for f in self.files], "skipped": self.skipped}


@dataclass
class FileProgress:
    path: str
    size: int | None
    done: int = 0  # bytes on disk
    resumed_from: int = 0  # bytes that were already on disk when this run began with it
    status: str = "pending"  # pending | active | done | present | failed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Tracker:
    """Thread-safe progress of one pull. `on_change(snapshot)` is called at most every `every_s`
    (and always on a file's start and end) from whichever thread made the change."""

    def __init__(self, files: list[RemoteFile], on_change: Callable[[dict[str, Any]], None] | None = None,
                 every_s: float = 0.25, clock: Callable[[], float] = time.monotonic) -> None:
        self.files = {f.path: FileProgress(f.path, f.size) for f in files}
        self.total = sum(f.size or 0 for f in files)
        self.fetched = 0  # bytes received over the network by this run
        self._lock = threading.Lock()
        self._clock = clock
        self.started = clock()
        self._samples: deque[tuple[float, int]] = deque([(self.started, 0)])
        self._on_change, self._every, self._last_emit = on_change, every_s, 0.0

    # -- fed by the download threads ------------------------------------------------------------
    def begin(self, path: str, on_disk: int) -> None:
        with self._lock:
            fp = self.files[path]
            fp.status, fp.done, fp.resumed_from = "active", on_disk, on_disk
        self._emit(force=True)

    def present(self, path: str) -> None:
        """Already complete on disk from an earlier run: nothing to fetch."""
        with self._lock:
            fp = self.files[path]
            fp.status, fp.done, fp.resumed_from = "present", fp.size or 0, fp.size or 0
        self._emit(force=True)

    def add(self, path: str, n: int) -> None:
        with self._lock:
            self.files[path].done += n
            self.fetched += n
            now = self._clock()
            self._samples.append((now, self.fetched))
            while len(self._samples) > 2 and now - self._samples[1][0] > RATE_WINDOW_S:
                self._samples.popleft()
        self._emit()

    def restart_file(self, path: str) -> None:
        """The server ignored a range request: the file starts again from byte 0."""
        with self._lock:
            fp = self.files[path]
            fp.done = fp.resumed_from = 0
        self._emit(force=True)

    def finish(self, path: str, ok: bool = True) -> None:
        with self._lock:
            fp = self.files[path]
            fp.status = "done" if ok else "failed"
            if ok and fp.size is not None:
                fp.done = fp.size
        self._emit(force=True)

    # -- read by the display --------------------------------------------------------------------
    def rate(self) -> float | None:
        """Bytes/s received over the last RATE_WINDOW_S seconds; None before a second of data."""
        with self._lock:
            (t0, b0), (t1, b1) = self._samples[0], (self._clock(), self.fetched)
        if t1 - t0 < 1.0 or b1 <= b0:
            return None
        return (b1 - b0) / (t1 - t0)

    def snapshot(self) -> dict[str, Any]:
        rate = self.rate()
        with self._lock:
            done = sum(f.done for f in self.files.values())
            resumed = sum(f.resumed_from for f in self.files.values())
            files = [f.to_dict() for f in self.files.values()]
            fetched = self.fetched
        left = max(self.total - done, 0)
        return {"total_bytes": self.total, "done_bytes": done, "fetched_bytes": fetched,
                "resumed_bytes": resumed, "rate_bps": rate,
                "eta_s": (left / rate) if rate else (0.0 if left == 0 else None),
                "elapsed_s": self._clock() - self.started,
                "files_done": sum(f["status"] in ("done", "present") for f in files),
                "files_total": len(files), "files": files}

    def _emit(self, force: bool = False) -> None:
        if self._on_change is None:
            return
        now = self._clock()
        if not force and now - self._last_emit < self._every:
            return
        self._last_emit = now
        self._on_change(self.snapshot())


# -- text for people ---------------------------------------------------------------------------------
def human_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def human_seconds(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def overall_line(snap: dict[str, Any]) -> str:
    """`[3/8 files] 12.3 GB of 29.5 GB (41.7%), 85.2 MB/s, ETA 3m22s`"""
    total, done = snap["total_bytes"], snap["done_bytes"]
    pct = 100.0 * done / total if total else 100.0
    rate = f"{human_bytes(snap['rate_bps'])}/s" if snap.get("rate_bps") else "rate ?"
    return (f"[{snap['files_done']}/{snap['files_total']} files] {human_bytes(done)} of {human_bytes(total)} "
            f"({pct:.1f}%), {rate}, ETA {human_seconds(snap.get('eta_s'))}")


def os_error(e: OSError, path: Path | None) -> PullError:
    where = f" writing {path}" if path is not None else (f" at {e.filename}" if e.filename else "")
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return PullError(f"disk full{where} ({e.strerror}): free some space and run pull again; it continues "
                         "where it stopped", "disk-full")
    return PullError(f"{e.strerror or e}{where}", "os")


def summary_text(r: dict[str, Any]) -> str:
    lines = []
    fetched = f"{human_bytes(r['bytes_fetched'])} fetched, {human_bytes(r['bytes_resumed'])} already there"
    if r["verified"]:
        exp = (f" ({r['params_source']} expects {r['params_expected']:,})" if r.get("params_expected") else "")
        lines.append(f"verified: {r['local_dir']} ({len(r['files'])} files, {human_bytes(r['bytes'])}; "
                     f"{r.get('shards', 0)} shard(s), {r['params']:,} parameters in the headers{exp}); "
                     f"{fetched} in {human_seconds(r['seconds'])}")
    else:
        lines.append(f"NOT verified: {r['repo_id']} in {r['local_dir']} ({fetched})")
        lines += [f"  problem: {p}" for p in r["problems"]]
    if r.get("model_set_error"):
        lines.append(f"could not set server.model: {r['model_set_error']}")
    elif r.get("model_set"):
        lines.append(f'server.model = "{r["local_dir"]}" saved to {r["model_set"]}')
    elif r["verified"]:
        lines.append(f"use it: --set server.model={r['local_dir']} (or pull again with --set-model)")
    return "\n".join(lines)
