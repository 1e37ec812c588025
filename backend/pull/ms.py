"""ModelScope, through its own client (the optional extra: pip install 'qwen-tui[modelscope]').

`modelscope` 1.40 hands every hub download to its `modelscope_hub` package, which is what is called
here: `HubApi.list_repo_files` for the files, sizes and sha256 (before anything is fetched, for the
space check), and the download manager's `download_file` per file into `local_dir`, with its
progress callbacks (bytes to the Tracker), its cancel event, its sha256 and size checks, and its own
resume: an interrupted file stays as `<file>.incomplete` and the next call asks for the rest with a
Range request. The endpoint is `MODELSCOPE_ENDPOINT` (or --endpoint), the token
`MODELSCOPE_API_TOKEN` or `modelscope login`; the token is never printed.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from backend.pull.progress import Cancelled, Listing, PullError, RemoteFile, Tracker, os_error

INSTALL = "pip install 'qwen-tui[modelscope]' (or pip install modelscope)"


def _client() -> Any:  # the modelscope_hub module: it ships no type information
    if "tqdm" not in sys.modules:
        os.environ.setdefault("TQDM_DISABLE", "1")  # its own bars on stderr: the Tracker shows progress
    try:
        import modelscope_hub  # only when a pull runs: the hub clients are slow to import
    except ImportError:
        raise PullError(f"the ModelScope client is not installed: {INSTALL}", "missing-client") from None
    return modelscope_hub


def explain(e: BaseException, repo_id: str, endpoint: str, revision: str) -> PullError:
    if isinstance(e, PullError):
        return e
    hub = _client()
    errors = hub.errors
    if isinstance(e, errors.NotExistError):
        return PullError(f"{repo_id} (revision {revision}) not found on {endpoint}: {str(e).splitlines()[0]}",
                         "repo-not-found")
    if isinstance(e, (errors.AuthenticationError, errors.PermissionDeniedError)):
        return PullError(f"{endpoint} refused access to {repo_id}: set MODELSCOPE_API_TOKEN or run "
                         "`modelscope login`", "unauthorized")
    if isinstance(e, errors.NetworkError):
        return PullError(f"cannot reach {endpoint}: {e}; run pull again to continue", "unreachable")
    if isinstance(e, errors.FileIntegrityError):
        return PullError(f"a file of {repo_id} failed ModelScope's size/sha256 check: {e}", "integrity")
    if isinstance(e, OSError):
        return os_error(e, None)
    return PullError(f"ModelScope: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", "error")


def _callback_class(tracker: Tracker, path: str, cancel: threading.Event, on_disk: int = 0) -> type[Any]:
    """The client wants a class it instantiates per file with (filename, file_size). It reports the
    bytes it resumes from (already on disk) through update() too: those are not counted again."""
    hub: Any = _client()
    skip = [on_disk]

    class ToTracker(hub.ProgressCallback):  # type: ignore[misc]  # an untyped client's base class
        def update(self, size: int) -> None:
            if cancel.is_set():
                raise Cancelled()
            size = int(size or 0)
            if skip[0] and size > 0:
                taken = min(skip[0], size)
                skip[0] -= taken
                size -= taken
            if size:
                tracker.add(path, size)

        def end(self) -> None:
            pass

    return ToTracker


class ModelScopeSource:
    name = "modelscope"

    def __init__(self, endpoint: str | None = None, token: str | None = None, api: Any = None) -> None:
        hub = _client()
        # read per pull: the client's default config keeps the first endpoint it saw in this process
        endpoint = endpoint or os.environ.get("MODELSCOPE_ENDPOINT") or None
        self.api = api or hub.HubApi(endpoint=endpoint, token=token)
        config = getattr(self.api, "_config", None)
        self.endpoint = str(endpoint or getattr(config, "endpoint", None) or "https://www.modelscope.cn").rstrip("/")

    def list_files(self, repo_id: str, revision: str | None) -> Listing:
        rev = revision or "master"
        try:
            infos = self.api.list_repo_files(repo_id, "model", revision=rev, recursive=True)
        except Exception as e:  # noqa: BLE001
            raise explain(e, repo_id, self.endpoint, rev) from None
        files = [RemoteFile(i.path, int(i.size) if i.size is not None else None, i.sha256)
                 for i in infos if getattr(i, "type", "blob") != "tree" and i.path]
        return Listing("modelscope", self.endpoint, repo_id, rev, None, files)

    def fetch(self, listing: Listing, rf: RemoteFile, local_dir: Path, tracker: Tracker,
              cancel: threading.Event) -> None:
        incomplete = local_dir / (rf.path + ".incomplete")  # what the client resumes from
        have = incomplete.stat().st_size if incomplete.is_file() else 0
        tracker.begin(rf.path, have)
        try:
            self.api.downloader.download_file(
                listing.repo_id, "model", rf.path, revision=listing.revision, local_dir=local_dir,
                expected_sha256=rf.sha256, file_size=rf.size,
                progress_callbacks=[_callback_class(tracker, rf.path, cancel, have)], _cancel_event=cancel)
        except Cancelled:
            raise
        except Exception as e:  # noqa: BLE001
            if cancel.is_set():
                raise Cancelled() from None
            raise explain(e, listing.repo_id, self.endpoint, listing.revision) from None
