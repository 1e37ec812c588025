"""A fake ModelScope hub (what MODELSCOPE_ENDPOINT points at), for tests only: a real HTTP server on
127.0.0.1 with the two endpoints the `modelscope` client (its modelscope_hub 0.5 package) calls for a
download, read from its source:

- GET /api/v1/models/{org}/{name}/repo/files?Revision=R&Recursive=True: {"Code": 200, "Data": {"Files":
  [{"Path", "Name", "Size", "Sha256", "Type": "blob"}]}};
- GET /api/v1/models/{org}/{name}/repo?Revision=R&FilePath=F, with `Range: bytes=N-` (206) for resume.

Unknown repos and files are 404 with ModelScope's error body. It serves the same folders as
tests/helpers/hub_mirror.py (`cuts`, `rate_bps`, `sent`, `log` work the same way).
"""

from __future__ import annotations

import hashlib
import json
import re
from urllib.parse import parse_qs, unquote, urlparse

from tests.helpers.hub_mirror import HubMirror, _Handler


class _MsHandler(_Handler):
    def _route(self) -> None:
        url = urlparse(self.path)
        path, query = unquote(url.path), parse_qs(url.query)
        self.server.log.append((self.command, self.path, self.headers.get("Range")))
        m = re.fullmatch(r"/api/v1/models/([^/]+/[^/]+)/repo/files", path)
        if m:
            return self._files(m[1], (query.get("Revision") or ["master"])[0])
        m = re.fullmatch(r"/api/v1/models/([^/]+/[^/]+)/repo", path)
        if m and query.get("FilePath"):
            return self._file(m[1], (query.get("Revision") or ["master"])[0], query["FilePath"][0])
        self._ms_error(404, f"no route {path}")

    def _ms_error(self, status: int, message: str) -> None:
        body = json.dumps({"Code": 10010205, "Message": message, "Success": False, "RequestId": "x"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _ms_repo(self, repo_id: str, rev: str):
        repo = self.server.repos.get(repo_id)
        if repo is None or rev not in repo.revisions:
            self._ms_error(404, f"model {repo_id} (revision {rev}) not found")
            return None
        return repo

    def _files(self, repo_id: str, rev: str) -> None:
        repo = self._ms_repo(repo_id, rev)
        if repo is None:
            return
        files = [{"Path": rel, "Name": rel.rsplit("/", 1)[-1], "Size": e["size"], "Type": "blob",
                  "Sha256": e.get("sha256") or hashlib.sha256((repo.folder / rel).read_bytes()).hexdigest()}
                 for rel, e in repo.files.items()]
        body = json.dumps({"Code": 200, "Data": {"Files": files}, "Success": True, "Message": ""}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _file(self, repo_id: str, rev: str, rel: str) -> None:
        repo = self._ms_repo(repo_id, rev)
        if repo is None:
            return
        if rel not in repo.files:
            return self._ms_error(404, f"file {rel} not found")
        self._send_body(repo, rel, repo.files[rel])


class ModelScopeMirror(HubMirror):
    def __init__(self, repos=None, port: int = 0) -> None:
        super().__init__(repos, port)
        self.RequestHandlerClass = _MsHandler

    def add(self, repo_id, folder, **kw):
        kw.setdefault("tags", ("master",))
        return super().add(repo_id, folder, **kw)
