"""The ModelScope glue (backend/pull/ms.py) with a stand-in for modelscope_hub's HubApi: the listing it
turns into RemoteFiles, the download call it makes per file (sha256, size, local_dir, callbacks,
cancel event), progress into the Tracker, errors as sentences, and a missing client."""

from __future__ import annotations

import sys
import threading
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from backend.pull import Pull, PullOptions
from backend.pull.progress import Cancelled, Tracker

DEMO = Path(__file__).resolve().parent


class NotExistError(Exception):
    pass


class AuthenticationError(Exception):
    pass


class FakeErrors:
    NotExistError = NotExistError
    AuthenticationError = AuthenticationError
    PermissionDeniedError = type("PermissionDeniedError", (Exception,), {})
    NetworkError = type("NetworkError", (Exception,), {})
    FileIntegrityError = type("FileIntegrityError", (Exception,), {})


class ProgressCallback:
    def __init__(self, filename, file_size):
        self.filename, self.file_size = filename, file_size


@dataclass
class FileInfo:
    path: str
    size: int
    sha256: str | None = None
    type: str = "blob"


class FakeDownloader:
    def __init__(self, folder: Path) -> None:
        self.folder, self.calls = folder, []

    def download_file(self, repo_id, repo_type, file_path, *, revision, local_dir, expected_sha256, file_size,
                      progress_callbacks, _cancel_event):
        self.calls.append(dict(repo_id=repo_id, repo_type=repo_type, file_path=file_path, revision=revision,
                               local_dir=local_dir, sha256=expected_sha256, size=file_size))
        data = (self.folder / file_path).read_bytes()
        cbs = [cls(file_path, file_size) for cls in progress_callbacks]
        out = Path(local_dir) / file_path
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "wb") as f:
            for i in range(0, len(data), 4096):
                if _cancel_event.is_set():
                    raise RuntimeError("cancelled by the event")
                f.write(data[i:i + 4096])
                for cb in cbs:
                    cb.update(len(data[i:i + 4096]))
        return out


class FakeHubApi:
    def __init__(self, folder: Path, missing: bool = False) -> None:
        self._config = types.SimpleNamespace(endpoint="http://127.0.0.1:1/ms")
        self.folder, self.missing = folder, missing
        self.downloader = FakeDownloader(folder)
        self.listed = []

    def list_repo_files(self, repo_id, repo_type, *, revision=None, recursive=True):
        self.listed.append((repo_id, repo_type, revision, recursive))
        if self.missing:
            raise NotExistError(f"model {repo_id} does not exist")
        import hashlib

        out = [FileInfo("sub", 0, type="tree")]
        for p in sorted(self.folder.iterdir()):
            if p.is_file():
                out.append(FileInfo(p.name, p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest()))
        return out


@pytest.fixture
def fake_client(monkeypatch):
    mod = types.ModuleType("modelscope_hub")
    mod.ProgressCallback = ProgressCallback
    mod.errors = FakeErrors
    mod.HubApi = lambda endpoint=None, token=None: None
    monkeypatch.setitem(sys.modules, "modelscope_hub", mod)
    return mod


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from tests.helpers.hub_mirror import make_sharded_model

    return make_sharded_model(tmp_path_factory.mktemp("ms") / "repo", 2)


def test_listing_and_download_calls(fake_client, folder, tmp_path, qhome):
    from backend.pull.ms import ModelScopeSource

    api = FakeHubApi(folder)
    src = ModelScopeSource(api=api)
    r = Pull(PullOptions("qwen/Qwen2.5-Demo", source="modelscope", local_dir=tmp_path / "o"), source=src).run()
    assert r["verified"], r["problems"]
    assert r["source"] == "modelscope" and r["revision"] == "master" and r["endpoint"] == "http://127.0.0.1:1/ms"
    assert api.listed == [("qwen/Qwen2.5-Demo", "model", "master", True)]
    names = {c["file_path"] for c in api.downloader.calls}
    assert names == {p.name for p in folder.iterdir()}  # the "tree" entry is not a file
    shard = next(c for c in api.downloader.calls if c["file_path"].endswith("00001-of-00002.safetensors"))
    assert shard["sha256"] and shard["size"] == (folder / shard["file_path"]).stat().st_size
    assert shard["local_dir"] == (tmp_path / "o").resolve() and shard["repo_type"] == "model"
    assert r["bytes_fetched"] == r["bytes"]


def test_revision_is_passed(fake_client, folder, tmp_path, qhome):
    from backend.pull.ms import ModelScopeSource

    api = FakeHubApi(folder)
    Pull(PullOptions("qwen/Qwen2.5-Demo", source="modelscope", revision="v1.0", local_dir=tmp_path / "o"),
         source=ModelScopeSource(api=api)).run()
    assert api.listed[0][2] == "v1.0" and {c["revision"] for c in api.downloader.calls} == {"v1.0"}


def test_not_found_is_one_sentence(fake_client, folder, tmp_path, qhome):
    from backend.pull.ms import ModelScopeSource

    r = Pull(PullOptions("qwen/Nope", source="modelscope", local_dir=tmp_path / "o"),
             source=ModelScopeSource(api=FakeHubApi(folder, missing=True))).run()
    assert r["error_kind"] == "repo-not-found" and "qwen/Nope (revision master) not found" in r["problems"][0]


def test_cancel_stops_through_the_callback(fake_client, folder, tmp_path):
    from backend.pull.ms import ModelScopeSource

    src = ModelScopeSource(api=FakeHubApi(folder))
    listing = src.list_files("qwen/x", None)
    rf = next(f for f in listing.files if f.path.endswith(".safetensors"))
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        src.fetch(listing, rf, tmp_path, Tracker(listing.files), cancel)


def test_missing_client_says_how_to_install(monkeypatch, tmp_path, qhome):
    monkeypatch.setitem(sys.modules, "modelscope_hub", None)  # import fails
    r = Pull(PullOptions("qwen/Qwen2.5-Demo", source="modelscope", local_dir=tmp_path / "o")).run()
    assert r["error_kind"] == "missing-client" and "qwen-tui[modelscope]" in r["problems"][0]


# -- the real client against tests/helpers/modelscope_mirror.py ------------------------------------------------
@pytest.fixture
def ms_mirror(folder, tmp_path, monkeypatch):
    pytest.importorskip("modelscope_hub")
    from tests.helpers.modelscope_mirror import ModelScopeMirror

    m = ModelScopeMirror()
    m.add("qwen/Qwen2.5-Demo", folder)
    m.start()
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", m.url)
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms-cache"))
    monkeypatch.setenv("MODELSCOPE_HOME", str(tmp_path / "ms-home"))
    yield m
    m.stop()


def _total(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def test_real_client_full_download_verified(ms_mirror, folder, tmp_path, qhome):
    r = Pull(PullOptions("qwen/Qwen2.5-Demo", source="modelscope", local_dir=tmp_path / "o")).run()
    assert r["verified"], r["problems"]
    assert r["endpoint"] == ms_mirror.url and r["revision"] == "master"
    assert ms_mirror.bytes_sent == _total(folder) == r["bytes_fetched"]
    assert any("/repo/files?Revision=master" in p for _, p, _ in ms_mirror.log)


def test_real_client_cancel_then_resume_fetches_only_what_is_missing(ms_mirror, folder, tmp_path, qhome):
    ms_mirror.rate_bps = 400_000
    cancel = threading.Event()

    def on_event(phase, data):
        if phase == "downloading" and data["done_bytes"] > 600_000:
            cancel.set()

    first = Pull(PullOptions("qwen/Qwen2.5-Demo", source="modelscope", local_dir=tmp_path / "o"),
                 cancel=cancel, on_event=on_event).run()
    assert first.get("cancelled")
    ms_mirror.wait_idle()
    sent = ms_mirror.bytes_sent
    ms_mirror.rate_bps = 0
    ms_mirror.cuts["model-00002-of-00002.safetensors"] = [900_000]  # and a dropped connection on the way
    second = Pull(PullOptions("qwen/Qwen2.5-Demo", source="modelscope", local_dir=tmp_path / "o")).run()
    assert second["verified"], second["problems"]
    assert second["bytes_resumed"] > 0
    again = ms_mirror.bytes_sent - sent
    assert again == _total(folder) - second["bytes_resumed"] == second["bytes_fetched"]
    assert any(rng and rng.startswith("bytes=") for _, _, rng in ms_mirror.log)


def test_real_client_404(ms_mirror, tmp_path, qhome):
    r = Pull(PullOptions("qwen/Nope", source="modelscope", local_dir=tmp_path / "o")).run()
    assert r["error_kind"] == "repo-not-found" and "\n" not in r["problems"][0]
