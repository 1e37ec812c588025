"""The Hugging Face hub, or any mirror of it (`HF_ENDPOINT`), through the `huggingface_hub` client.

Listing: `HfApi.model_info(files_metadata=True)` (GET /api/models/{repo}/revision/{rev}?blobs=true):
the commit the revision resolves to and every file with its size (and LFS sha256).
Per file: `get_hf_file_metadata` (HEAD /{repo}/resolve/{commit}/{file}: ETag, X-Repo-Commit,
X-Linked-Size, the redirect) and the library's `http_get`, which streams with retries and resumes a
dropped connection with a Range request.

Why not `hf_hub_download(local_dir=...)`: since huggingface_hub PR #4228 (in 2.4.0 here) it writes
each file to a fresh uuid-named temp file and deletes it on any failure, so a second run starts every
unfinished file from byte 0. Here the bytes received go to `<local_dir>/.cache/qwen-tui/<file>.part`
(with the ETag beside it), and a later run hands `http_get` that file and `resume_size`: it asks for
the rest with `Range: bytes=N-` (and starts over itself if the server ignores the range).
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlparse

from backend.pull.progress import Cancelled, Listing, PullError, RemoteFile, Tracker, os_error

LIBRARY = "qwen-tui"
READ_CHUNK = 1 << 20  # 1 MiB


def default_endpoint() -> str:
    from huggingface_hub import constants  # only when a pull runs: the hub clients are slow to import

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def token_source() -> str:
    """Where the client's token comes from (never the token itself)."""
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return "HF_TOKEN"
    try:
        from huggingface_hub import get_token  # only when a pull runs: the hub clients are slow to import

        return "the hub login (hf auth login)" if get_token() else "none"
    except Exception:  # noqa: BLE001 - a broken token file is "none", not a crash
        return "none"


def explain(e: BaseException, repo_id: str, endpoint: str, revision: str) -> PullError:
    """A client error as one sentence with its fix."""
    from huggingface_hub import errors  # only when a pull runs: the hub clients are slow to import

    if isinstance(e, PullError):
        return e
    if isinstance(e, errors.GatedRepoError):
        return PullError(f"{repo_id} is gated on {endpoint}: accept its license on the model page, then give a "
                         "token (HF_TOKEN=... or `hf auth login`)", "gated")
    if isinstance(e, errors.RevisionNotFoundError):
        return PullError(f"revision {revision!r} of {repo_id} not found on {endpoint}", "revision-not-found")
    if isinstance(e, errors.RemoteEntryNotFoundError):
        return PullError(f"a file of {repo_id} is listed but not served by {endpoint} (404): {e}", "file-not-found")
    if isinstance(e, errors.RepositoryNotFoundError):
        return PullError(f"repository {repo_id} not found on {endpoint} (404); check the id, or give a token "
                         "for a private repo (HF_TOKEN=... or `hf auth login`)", "repo-not-found")
    if isinstance(e, errors.HfHubHTTPError):
        status = getattr(getattr(e, "response", None), "status_code", "?")
        if status == 401:
            return PullError(f"{endpoint} refused the token for {repo_id} (401): check HF_TOKEN or `hf auth login`",
                             "unauthorized")
        return PullError(f"{endpoint} answered {status} for {repo_id}: {str(e).splitlines()[0]}", "http")
    try:
        import httpx2 as httpx_mod  # only when a pull runs: the hub clients are slow to import
    except ImportError:  # pragma: no cover - older clients use httpx / requests
        import httpx as httpx_mod  # type: ignore[no-redef]  # the same names, from the older client
    if isinstance(e, (httpx_mod.ConnectError, httpx_mod.TimeoutException)):
        return PullError(f"cannot reach {endpoint}: {e} (set HF_ENDPOINT to a mirror you can reach)", "unreachable")
    if isinstance(e, httpx_mod.HTTPError):
        return PullError(f"the connection to {endpoint} failed: {type(e).__name__}: {e}; run pull again to resume",
                         "network")
    if isinstance(e, OSError):
        return os_error(e, None)
    return PullError(f"{type(e).__name__}: {e}", "error")


class _Bar:
    """What `http_get` takes for a tqdm: bytes go to the Tracker; a cancel stops the stream."""

    def __init__(self, tracker: Tracker, path: str, cancel: threading.Event, had: int, **kw: Any) -> None:
        self.tracker, self.path, self.cancel = tracker, path, cancel
        if had and not kw.get("initial"):  # the server ignored our Range: http_get starts over
            tracker.restart_file(path)

    def __enter__(self) -> "_Bar":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def close(self) -> None:
        pass

    def update(self, n: int | float | None = 1) -> None:
        if self.cancel.is_set():
            raise Cancelled()
        n = int(n or 0)
        if n < 0:
            self.tracker.restart_file(self.path)
        elif n:
            self.tracker.add(self.path, n)


class HfSource:
    name = "hf"

    def __init__(self, endpoint: str | None = None, token: str | None = None) -> None:
        from huggingface_hub import constants  # only when a pull runs: the hub clients are slow to import

        # http_get reads the stream in DOWNLOAD_CHUNK_SIZE pieces (10 MB): progress, a cancel and the
        # bytes on disk for a resume would move in 10 MB steps (lost on a kill, per file in flight)
        constants.DOWNLOAD_CHUNK_SIZE = min(constants.DOWNLOAD_CHUNK_SIZE, READ_CHUNK)
        self.endpoint = (endpoint or default_endpoint()).rstrip("/")
        self.token = token  # None: the client's own (HF_TOKEN or its login)

    def list_files(self, repo_id: str, revision: str | None) -> Listing:
        from huggingface_hub import HfApi  # only when a pull runs: the hub clients are slow to import

        rev = revision or "main"
        try:
            info = HfApi(endpoint=self.endpoint, token=self.token, library_name=LIBRARY).model_info(
                repo_id, revision=revision, files_metadata=True)
        except Exception as e:  # noqa: BLE001 - every client error becomes a sentence
            raise explain(e, repo_id, self.endpoint, rev) from None
        files = [RemoteFile(s.rfilename, s.size, s.lfs.sha256 if s.lfs is not None else None)
                 for s in info.siblings or []]
        return Listing("hf", self.endpoint, repo_id, rev, info.sha, files)

    def fetch(self, listing: Listing, rf: RemoteFile, local_dir: Path, tracker: Tracker,
              cancel: threading.Event) -> None:
        """Bring one file into local_dir, continuing a .part left by an earlier run."""
        # only when a pull runs: the hub clients are slow to import
        from huggingface_hub import get_hf_file_metadata, hf_hub_url
        from huggingface_hub.file_download import http_get
        from huggingface_hub.utils._headers import build_hf_headers

        try:
            url = hf_hub_url(listing.repo_id, rf.path, revision=listing.commit or listing.revision,
                             endpoint=self.endpoint)
            meta = get_hf_file_metadata(url, token=self.token, endpoint=self.endpoint)
        except Exception as e:  # noqa: BLE001
            raise explain(e, listing.repo_id, self.endpoint, listing.revision) from None
        size = meta.size if meta.size is not None else rf.size
        etag = meta.etag or ""
        dest, part = local_dir / rf.path, part_path(local_dir, rf.path)
        tag = part.with_name(part.name + ".etag")
        part.parent.mkdir(parents=True, exist_ok=True)
        have = part.stat().st_size if part.is_file() else 0
        if have and (not tag.is_file() or tag.read_text(encoding="utf-8").strip() != etag
                     or (size is not None and have > size)):
            have = 0  # another version of the file, or longer than it can be: start over
        tag.write_text(etag, encoding="utf-8")
        tracker.begin(rf.path, have)
        # the token goes to the hub only, never to a CDN the hub redirects to
        same_host = urlparse(meta.location).netloc == urlparse(self.endpoint).netloc
        headers = build_hf_headers(token=self.token if same_host else False, library_name=LIBRARY)
        fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            with os.fdopen(fd, "r+b") as fh:
                fh.seek(have)
                fh.truncate()
                http_get(meta.location, fh, resume_size=have, headers=headers, expected_size=size,
                         displayed_filename=rf.path,
                         # http_get calls tqdm_class(...) like a class; a partial does that too
                         tqdm_class=cast("type[Any]", functools.partial(_Bar, tracker, rf.path, cancel, have)))
                fh.flush()
                os.fsync(fh.fileno())
        except (Cancelled, PullError):
            raise
        except OSError as e:
            raise os_error(e, part) from None
        except Exception as e:  # noqa: BLE001
            raise explain(e, listing.repo_id, self.endpoint, listing.revision) from None
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, dest)
        tag.unlink(missing_ok=True)


def part_path(local_dir: Path, rel: str) -> Path:
    return local_dir / ".cache" / "qwen-tui" / (rel + ".part")
