"""One pull, start to end: list, check the space, download (resumable, cancellable), verify.

`Pull(options).run()` returns the result dict that `qwen-tui pull --json` prints:
repo_id, source, revision, local_dir, files, bytes, seconds, verified, problems (plus commit,
bytes_fetched, bytes_resumed, params, params_expected, free_bytes, endpoint, token, skipped).
`on_event(phase, data)` reports each phase (listing, preflight, downloading, verifying, done, failed,
cancelled) and, while downloading, the Tracker's snapshot a few times a second.
"""

from __future__ import annotations

import fcntl
import fnmatch
import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable

from backend import paths
from backend.pull.progress import Cancelled, Listing, PullError, RemoteFile, Tracker, human_bytes, os_error
from backend.pull.verify import verify

if TYPE_CHECKING:
    from backend.pull.hf import HfSource
    from backend.pull.ms import ModelScopeSource
    from backend.settings import Settings

SOURCES = ("hf", "modelscope")
# when a repo has safetensors, vLLM loads only those: the other weight formats are not fetched
NOT_NEEDED = ("*.bin", "*.pth", "*.pt", "*.h5", "*.msgpack", "*.ckpt", "*.gguf", "*.onnx", "*.ot",
              "original/*", "*.bin.index.json")


@dataclass
class PullOptions:
    repo_id: str
    source: str = "hf"
    revision: str | None = None
    local_dir: Path | None = None
    endpoint: str | None = None
    workers: int = 4


def default_local_dir(repo_id: str) -> Path:
    return paths.data_dir() / "models" / repo_id


def check_repo_id(repo_id: str) -> str | None:
    """Why this is not a repo id (ORG/NAME), or None."""
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(parts) or any(p in (".", "..") for p in parts) or repo_id.startswith("~"):
        return f"{repo_id!r} is not a repository id (ORG/NAME, e.g. Qwen/Qwen2.5-14B-Instruct)"
    return None


def make_source(name: str, endpoint: str | None = None) -> HfSource | ModelScopeSource:
    if name == "hf":
        from backend.pull.hf import HfSource  # only when a pull runs: the hub clients are slow to import

        return HfSource(endpoint)
    if name == "modelscope":
        from backend.pull.ms import ModelScopeSource  # only when a pull runs: the hub clients are slow to import

        return ModelScopeSource(endpoint)
    raise PullError(f"unknown source {name!r}: one of {', '.join(SOURCES)}", "bad-input")


def choose_files(listing: Listing) -> Listing:
    """Drop what vLLM will not load (other weight formats beside safetensors); refuse odd paths."""
    for f in listing.files:
        parts = f.path.split("/")
        if f.path.startswith("/") or ".." in parts or "" in parts or f.path.startswith(".cache/"):
            raise PullError(f"the source lists a file with an unsafe path: {f.path!r}", "bad-listing")
    if not any(f.path.endswith(".safetensors") for f in listing.files):
        return listing
    keep = [f for f in listing.files if not any(fnmatch.fnmatch(f.path, p) for p in NOT_NEEDED)]
    skipped = [f.path for f in listing.files if f not in keep]
    return Listing(listing.source, listing.endpoint, listing.repo_id, listing.revision, listing.commit, keep,
                   listing.skipped + skipped)


def free_bytes(path: Path) -> tuple[Path, int]:
    """(the existing folder measured, its filesystem's free bytes for this user)."""
    probe = Path(path).resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe, shutil.disk_usage(probe).free


def work_dir(local_dir: Path) -> Path:
    return local_dir / ".cache" / "qwen-tui"


def _manifest(local_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((work_dir(local_dir) / "manifest.json").read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def on_disk(listing: Listing, local_dir: Path) -> dict[str, int]:
    """Bytes of each listed file already in local_dir: complete files (same size and, when the
    source names the content, the same commit or hash as when they were fetched) and .part files."""
    from backend.pull.hf import part_path  # only when a pull runs: the hub clients are slow to import

    seen = _manifest(local_dir)
    raw = seen.get("files")
    files: dict[str, Any] = raw if isinstance(raw, dict) else {}
    out: dict[str, int] = {}
    for f in listing.files:
        dest = local_dir / f.path
        rec = files.get(f.path) or {}
        if dest.is_file() and f.size is not None and dest.stat().st_size == f.size:
            same = ((f.sha256 and rec.get("sha256") == f.sha256) or
                    (listing.commit and rec.get("commit") == listing.commit) or
                    (not rec and f.size > 0 and not seen))  # a folder fetched by other means: sizes decide
            if same or f.size == 0:
                out[f.path] = f.size
                continue
        part = part_path(local_dir, f.path)
        if not part.is_file():  # ModelScope's client keeps its partial file beside the target
            part = local_dir / (f.path + ".incomplete")
        out[f.path] = min(part.stat().st_size, f.size or 0) if part.is_file() else 0
    return out


class Pull:
    def __init__(self, options: PullOptions, source: Any = None,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None,
                 cancel: threading.Event | None = None,
                 free: Callable[[Path], tuple[Path, int]] = free_bytes) -> None:
        self.options = options
        self.source = source
        self.on_event = on_event or (lambda phase, data: None)
        self.cancel = cancel or threading.Event()
        self.free = free
        self.tracker: Tracker | None = None
        self.listing: Listing | None = None
        self.local_dir = Path(options.local_dir or default_local_dir(options.repo_id)).expanduser().resolve()
        self._manifest_lock = threading.Lock()

    def result(self, started: float, problems: list[str], verified: bool = False, **extra: Any) -> dict[str, Any]:
        snap = self.tracker.snapshot() if self.tracker else {}
        files = [{"path": f["path"], "size": f["size"], "status": f["status"],
                  "fetched": max(f["done"] - f["resumed_from"], 0)} for f in snap.get("files", [])]
        from backend.pull.hf import token_source  # only when a pull runs: the hub clients are slow to import

        out = {"repo_id": self.options.repo_id, "source": self.options.source,
               "revision": self.listing.revision if self.listing else (
                   self.options.revision or ("master" if self.options.source == "modelscope" else "main")),
               "local_dir": str(self.local_dir), "files": files,
               "bytes": self.listing.total_bytes if self.listing else 0,
               "seconds": round(time.monotonic() - started, 3), "verified": verified, "problems": problems,
               "commit": self.listing.commit if self.listing else None,
               "bytes_fetched": snap.get("fetched_bytes", 0), "bytes_resumed": snap.get("resumed_bytes", 0),
               "endpoint": self.listing.endpoint if self.listing else getattr(self.source, "endpoint", None),
               "token": token_source() if self.options.source == "hf" else "MODELSCOPE_API_TOKEN or login",
               "skipped": self.listing.skipped if self.listing else []}
        out.update(extra)
        return out

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        extra: dict[str, Any] = {}
        try:
            why = check_repo_id(self.options.repo_id)
            if why:
                raise PullError(why, "bad-input")
            if self.source is None:
                self.source = make_source(self.options.source, self.options.endpoint)
            self.on_event("listing", {"endpoint": self.source.endpoint})
            self.listing = choose_files(self.source.list_files(self.options.repo_id, self.options.revision))
            if not self.listing.files:
                raise PullError(f"{self.options.repo_id} lists no files", "empty")
            have = on_disk(self.listing, self.local_dir)
            probe, free = self.free(self.local_dir)
            need = sum(max((f.size or 0) - have.get(f.path, 0), 0) for f in self.listing.files)
            extra = {"free_bytes": free, "needed_bytes": need}
            self.on_event("preflight", {"listing": self.listing.to_dict(), "local_dir": str(self.local_dir),
                                        "free_bytes": free, "free_probe": str(probe), "needed_bytes": need,
                                        "present_bytes": sum(have.values())})
            if need > free:
                raise PullError(
                    f"not enough space in {probe}: the pull needs {human_bytes(need)} more "
                    f"({human_bytes(self.listing.total_bytes)} in all, {human_bytes(sum(have.values()))} already "
                    f"there) and {human_bytes(free)} is free; free {human_bytes(need - free)} or pick another "
                    "--local-dir", "disk-full")
            self.local_dir.mkdir(parents=True, exist_ok=True)
            with self._lock_dir():
                self._download(have)
            self.on_event("verifying", {})
            check = verify(self.local_dir, self.listing, self.options.repo_id)
            extra.update(params=check.params, params_expected=check.params_expected,
                         params_source=check.params_source, shards=check.shards)
            out = self.result(started, check.problems, check.verified, **extra)
            self.on_event("done" if check.verified else "failed", {"result": out})
            return out
        except Cancelled:
            out = self.result(started, ["cancelled: run pull again to continue where it stopped"], cancelled=True,
                              **extra)
            self.on_event("cancelled", {"result": out})
            return out
        except PullError as e:
            out = self.result(started, [e.message], error_kind=e.kind, **extra)
            self.on_event("failed", {"result": out})
            return out

    def _lock_dir(self) -> IO[str]:
        wd = work_dir(self.local_dir)
        wd.mkdir(parents=True, exist_ok=True)
        fh = open(wd / "lock", "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            raise PullError(f"another pull is writing into {self.local_dir}; wait for it or cancel it",
                            "busy") from None
        return fh  # closing the file (end of the with block) releases the lock

    def _download(self, have: dict[str, int]) -> None:
        assert self.listing is not None
        tracker = self.tracker = Tracker(self.listing.files, lambda snap: self.on_event("downloading", snap))
        todo: list[RemoteFile] = []
        for f in self.listing.files:
            if f.size is not None and have.get(f.path) == f.size and (self.local_dir / f.path).is_file():
                tracker.present(f.path)
            else:
                todo.append(f)
        errors: list[BaseException] = []

        def one(f: RemoteFile) -> None:
            if self.cancel.is_set():
                return
            try:
                self.source.fetch(self.listing, f, self.local_dir, tracker, self.cancel)
                tracker.finish(f.path)
                self._record(f)
            except BaseException as e:  # noqa: BLE001 - handed to the caller below
                tracker.finish(f.path, ok=False)
                errors.append(e)
                self.cancel.set()  # the first failure stops the others; their .part files stay

        workers = max(1, min(self.options.workers, len(todo)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pull") as pool:
            list(pool.map(one, todo))
        real = [_as_pull_error(e) for e in errors if not isinstance(e, Cancelled)]
        if real:
            # a full disk, wherever it struck (a shard, its .etag, the manifest), is the one to report
            raise next((e for e in real if e.kind == "disk-full"), real[0])
        if errors or self.cancel.is_set():
            raise Cancelled()
        self.on_event("downloading", tracker.snapshot())

    def _record(self, f: RemoteFile) -> None:
        """What was fetched, so that a later run knows a complete file from an old one."""
        with self._manifest_lock:
            data = _manifest(self.local_dir)
            raw = data.get("files")
            files: dict[str, Any] = raw if isinstance(raw, dict) else {}
            assert self.listing is not None  # _download, the only caller, has its listing
            files[f.path] = {"size": f.size, "sha256": f.sha256, "commit": self.listing.commit}
            data.update(repo_id=self.options.repo_id, source=self.options.source, files=files)
            path = work_dir(self.local_dir) / "manifest.json"
            tmp = path.with_name(f".manifest.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
            os.replace(tmp, path)


def not_downloaded(settings: Settings) -> str | None:
    """When server.model is a repo id that neither vLLM's cache nor `qwen-tui pull` has: a one-line
    note for the start (vLLM would download it itself, with no progress the console can show)."""
    import os  # only when a pull runs: the hub clients are slow to import

    # only when a pull runs: the hub clients are slow to import
    from backend.hf_cache import hf_cache_root
    from backend.hf_cache import snapshot as _snapshot

    model = str(settings.server_cfg.model or "")
    if not model or check_repo_id(model) or Path(model).expanduser().exists():
        return None
    env = {**os.environ, **settings.env}
    root = hf_cache_root(settings.server_cfg.download_dir, env, Path.home())
    if _snapshot(root / ("models--" + model.replace("/", "--"))) is not None:
        return None
    if (default_local_dir(model) / "config.json").is_file():
        return (f"{model} was pulled into {default_local_dir(model)} but server.model is the repo id: vLLM "
                "downloads it again (g, then u, uses the folder)")
    return f"{model} is not downloaded: vLLM downloads it during the start with no progress here (g gets it first)"


def _as_pull_error(e: BaseException) -> PullError:
    """What one download thread raised, as the sentence the user sees."""
    if isinstance(e, PullError):
        return e
    if isinstance(e, OSError):  # the manifest or a tag file written on a full disk, not only a shard
        return os_error(e, None)
    return PullError(f"{type(e).__name__}: {e}")
