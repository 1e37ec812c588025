"""The real `vllm-router` (PyPI `vllm-router`, the `router` extra): its command line, its admin API,
and a small supervisor that keeps it running (`qwen-tui router serve [--detach]`).

Readiness is `/readiness` (200 while at least one worker is healthy, with healthy_workers and
total_workers) and `/workers` (`is_healthy` per URL); never `/health`, which answers 503 as soon
as one worker is down. `add_worker` blocks until the worker answers its health check and forgets
the add if the client gives up, so callers check the box's own /health first (ops.undrain).

The supervisor starts the router with the boxes that answer /health now and are not drained, and
adds the others once they answer (a router started with a dead worker URL waits for it, up to
its --worker-startup-timeout-secs). Its state (pids, URL, log) is `router.json` in the state dir.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote, urlsplit

import httpx

from backend import paths
from backend.cluster.config import Cluster, bind_problem
from backend.httpclient import sync_client
from backend.spawn import Origin, router_supervisor

STARTUP_TIMEOUT_S = 30  # --worker-startup-timeout-secs: the supervisor passes only healthy workers


class RouterError(Exception):
    """The router could not be started, reached or told something; the message says why."""


# -- where things are --------------------------------------------------------------------------------
def state_path() -> Path:
    return paths.state_dir() / "router.json"


def drained_path() -> Path:
    return paths.state_dir() / "cluster.json"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def drained() -> set[str]:
    """Names of the boxes taken out of the router by `cluster drain` (kept out across its restarts)."""
    names = _read_json(drained_path()).get("drained") or []
    return {n for n in names if isinstance(n, str)}


def set_drained(name: str, on: bool) -> None:
    names = drained()
    names = names | {name} if on else names - {name}
    _write_json(drained_path(), {"drained": sorted(names), "updated_at": time.time()})


# -- the command line --------------------------------------------------------------------------------
def executable(cluster: Cluster) -> str | None:
    if cluster.router_bin:
        return cluster.router_bin if Path(cluster.router_bin).exists() or shutil.which(cluster.router_bin) else None
    here = Path(sys.executable).parent / "vllm-router"
    return str(here) if here.exists() else shutil.which("vllm-router")


def command(cluster: Cluster, workers: list[str] | None = None) -> list[str]:
    """The exact vllm-router argv for [cluster] (all boxes unless `workers` says which)."""
    if cluster.router != "vllm-router":
        raise RouterError(f"cluster.router = {cluster.router!r}: there is no router to run")
    why = bind_problem(cluster.router_url)
    if why:
        raise RouterError(why)
    url, murl = urlsplit(cluster.router_url), urlsplit(cluster.router_metrics_url)
    workers = [b.api_url for b in cluster.boxes] if workers is None else workers
    exe = executable(cluster) or "vllm-router"
    argv = [exe, "--host", url.hostname or "127.0.0.1", "--port", str(url.port or 30000)]
    if workers:
        argv += ["--worker-urls", *workers]
    mhost = murl.hostname or "127.0.0.1"
    if bind_problem(f"http://{mhost}"):
        mhost = "127.0.0.1"
    argv += ["--policy", cluster.router_policy,
             "--prometheus-host", mhost, "--prometheus-port", str(murl.port or 29000),
             "--health-check-interval-secs", str(cluster.health_interval_s),
             "--health-failure-threshold", str(cluster.health_failure_threshold),
             "--worker-startup-timeout-secs", str(STARTUP_TIMEOUT_S)]
    return argv


# -- the admin API ---------------------------------------------------------------------------------
class RouterClient:
    """Blocking calls to the router's HTTP API (loopback or a private address, never a proxy)."""

    def __init__(self, url: str, timeout: float = 3.0, transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._client = sync_client(timeout=timeout, transport=transport)

    def close(self) -> None:
        self._client.close()

    def _get(self, path: str) -> httpx.Response:
        try:
            return self._client.get(self.url + path)
        except httpx.HTTPError as e:
            raise RouterError(f"router {self.url}: {type(e).__name__}: {e or 'no answer'}") from None

    def readiness(self) -> dict[str, Any]:
        """{ready, healthy_workers, total_workers, reason}; raises RouterError when unreachable."""
        r = self._get("/readiness")
        try:
            body = r.json()
        except ValueError:
            body = {}
        return {"ready": r.status_code == 200 and body.get("status") == "ready",
                "healthy_workers": body.get("healthy_workers"), "total_workers": body.get("total_workers"),
                "reason": body.get("reason")}

    def workers(self) -> dict[str, dict[str, Any]]:
        """URL -> {is_healthy, load} from /workers."""
        r = self._get("/workers")
        try:
            items = r.json().get("workers") or []
        except (ValueError, AttributeError):
            raise RouterError(f"router {self.url}/workers: HTTP {r.status_code}, not JSON") from None
        return {str(w.get("url")).rstrip("/"): w for w in items if isinstance(w, dict)}

    def add_worker(self, url: str, timeout: float = 60.0) -> None:
        """Blocks until the router finds the worker healthy. Call it only for a box whose own /health
        already answers 200 (a dead URL blocks, and the add is lost if we give up)."""
        try:
            r = self._client.post(f"{self.url}/add_worker?url={quote(url, safe='')}", timeout=timeout)
        except httpx.HTTPError as e:
            raise RouterError(f"router add_worker {url}: {type(e).__name__}: {e or 'no answer'}") from None
        if r.status_code >= 400 and "already exists" not in r.text:
            raise RouterError(f"router add_worker {url}: HTTP {r.status_code} {r.text[:200]}")

    def remove_worker(self, url: str) -> None:
        try:
            r = self._client.post(f"{self.url}/remove_worker?url={quote(url, safe='')}")
        except httpx.HTTPError as e:
            raise RouterError(f"router remove_worker {url}: {type(e).__name__}: {e or 'no answer'}") from None
        if r.status_code >= 400 and "not found" not in r.text.lower():
            raise RouterError(f"router remove_worker {url}: HTTP {r.status_code} {r.text[:200]}")

    def breakers(self, metrics_url: str) -> dict[str, float]:
        """URL -> vllm_router_cb_state (0 closed; open or half-open otherwise) from the router's
        Prometheus endpoint; {} when it cannot be read. A worker whose breaker is open gets no
        requests even while /workers calls it healthy."""
        text = self.metrics_text(metrics_url) or ""
        out: dict[str, float] = {}
        for line in text.splitlines():
            m = re.match(r'vllm_router_cb_state\{[^}]*worker="([^"]+)"[^}]*\}\s+(\S+)', line)
            if m:
                try:
                    out[m.group(1).rstrip("/")] = float(m.group(2))
                except ValueError:
                    continue
        return out

    def metrics_text(self, metrics_url: str) -> str | None:
        try:
            r = self._client.get(metrics_url)
        except httpx.HTTPError:
            return None
        return r.text if r.status_code == 200 else None


def box_healthy(api_url: str, timeout: float = 2.0, client: httpx.Client | None = None) -> bool:
    """The box's own /health answers 200."""
    try:
        if client is not None:
            return client.get(api_url.rstrip("/") + "/health", timeout=timeout).status_code == 200
        with sync_client(timeout=timeout) as c:
            return c.get(api_url.rstrip("/") + "/health").status_code == 200
    except httpx.HTTPError:
        return False


# -- the supervisor ----------------------------------------------------------------------------------
def _alive(pid: Any, created: Any) -> bool:
    import psutil  # only this path needs it (start-up, or a cycle)

    try:
        p = psutil.Process(int(pid))
        alive: bool = abs(p.create_time() - float(created)) < 1.0 and p.status() != psutil.STATUS_ZOMBIE
        return alive
    except (psutil.Error, TypeError, ValueError):
        return False


def status() -> dict[str, Any]:
    """The router supervisor's state file, believed only while its pid lives with the recorded start."""
    data = _read_json(state_path())
    if not data:
        return {"state": "stopped", "supervisor_pid": None, "pid": None}
    if data.get("state") != "stopped" and not _alive(data.get("supervisor_pid"), data.get("supervisor_create_time")):
        data = dict(data, state="stopped", supervisor_pid=None, pid=None,
                    note="the router supervisor is gone (state file left behind)")
    return data


class RouterSupervisor:
    """Runs vllm-router until told to stop; restarts it when it exits (5 failures in 5 min: give up)."""

    def __init__(self, cluster: Cluster, on_line: Callable[[str], None] | None = None,
                 log_path: Path | None = None) -> None:
        self.cluster = cluster
        self.on_line = on_line
        self.log_path = log_path or paths.state_dir() / "logs" / "router.log"
        self._stop = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._adding: set[str] = set()

    def request_stop(self, *_: Any) -> None:
        self._stop.set()

    def _write(self, state: str, **extra: Any) -> None:
        import psutil  # only this path needs it (start-up, or a cycle)

        me = psutil.Process()
        _write_json(state_path(), {"state": state, "supervisor_pid": me.pid,
                                   "supervisor_create_time": me.create_time(),
                                   "pid": self.proc.pid if self.proc and self.proc.poll() is None else None,
                                   "url": self.cluster.router_url, "metrics_url": self.cluster.router_metrics_url,
                                   "log_path": str(self.log_path), "restarts": self.restarts,
                                   "updated_at": time.time(), **extra})

    def _workers_now(self) -> tuple[list[str], list[str]]:
        out = drained()
        up: list[str] = []
        left: list[str] = []
        for b in self.cluster.boxes:
            if b.name in out:
                continue
            (up if box_healthy(b.api_url, timeout=1.5) else left).append(b.api_url)
        return up, left

    def _reconcile(self, left: list[str]) -> list[str]:
        """Add the boxes left out at start once their /health answers (in a thread: add blocks)."""
        out = drained()
        names = {b.api_url: b.name for b in self.cluster.boxes}
        still = []
        for url in left:
            if names.get(url) in out or url in self._adding:
                continue
            if not box_healthy(url, timeout=1.0):
                still.append(url)
                continue
            self._adding.add(url)

            def add(u: str = url) -> None:
                c = RouterClient(self.cluster.router_url)
                try:
                    c.add_worker(u, timeout=30)
                except RouterError:
                    pass
                finally:
                    c.close()
                    self._adding.discard(u)

            threading.Thread(target=add, daemon=True, name=f"add-{url}").start()
        return still

    def _start(self) -> list[str]:
        exe = executable(self.cluster)
        if exe is None:
            raise RouterError("vllm-router is not installed: pip install 'qwen-tui[router]' "
                              "(or set cluster.router_bin)")
        up, left = self._workers_now()
        argv = command(self.cluster, up)
        self.log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        log = open(self.log_path, "ab")
        log.write(f"qwen-tui: router launch at {time.ctime()} argv: {' '.join(argv)}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
        self._write("running", argv=argv, workers_at_start=up, left_out=left, started_at=time.time())
        return left

    def run(self) -> int:
        failures: list[float] = []
        try:
            left = self._start()
        except RouterError as e:
            self._write("failed", detail=str(e))
            raise
        next_check = time.time() + self.cluster.health_interval_s
        while not self._stop.wait(0.2):
            assert self.proc is not None
            if self.proc.poll() is not None:
                failures = [t for t in failures if time.time() - t < 300] + [time.time()]
                if len(failures) >= 5:
                    self._write("failed", detail=f"vllm-router exited {len(failures)} times in 5 min "
                                                 f"(last code {self.proc.returncode}); see {self.log_path}")
                    return 1
                self.restarts += 1
                self._write("restarting", detail=f"vllm-router exited with code {self.proc.returncode}")
                if self._stop.wait(2.0):
                    break
                left = self._start()
            elif left and time.time() >= next_check:
                left = self._reconcile(left)
                next_check = time.time() + self.cluster.health_interval_s
        self._terminate()
        self._write("stopped", pid=None)
        return 0

    def _terminate(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self.request_stop)


def wait_listening(url: str, timeout: float) -> bool:
    """Until the router answers /readiness at all (ready or not), or timeout."""
    c = RouterClient(url, timeout=1.0)
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                c.readiness()
                return True
            except RouterError:
                time.sleep(0.2)
        return False
    finally:
        c.close()


def start_detached(origin: Origin, cluster: Cluster, timeout: float = 30.0) -> dict[str, Any]:
    """`qwen-tui router serve` in its own session; returns its state once the router listens."""
    st = status()
    if st.get("state") not in ("stopped", "failed", None):
        raise RouterError(f"a router supervisor already runs (pid {st.get('supervisor_pid')}, {st.get('url')}); "
                          "`qwen-tui router stop` first")
    if executable(cluster) is None:
        raise RouterError("vllm-router is not installed: pip install 'qwen-tui[router]' (or set cluster.router_bin)")
    logs = paths.state_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True, mode=0o700)
    out_path = logs / "router-supervisor.log"
    argv = router_supervisor(origin)
    with open(out_path, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    threading.Thread(target=proc.wait, daemon=True, name=f"reap-{proc.pid}").start()
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            tail = out_path.read_text(errors="replace").strip().splitlines()[-4:]
            raise RouterError(f"router not started (code {proc.returncode}): " + " | ".join(tail))
        st = status()
        if st.get("supervisor_pid") == proc.pid and st.get("state") == "running":
            if wait_listening(cluster.router_url, max(0.5, deadline - time.time())):
                return status()
        time.sleep(0.1)
    raise RouterError(f"the router did not listen on {cluster.router_url} within {timeout:.0f} s; see {out_path}")


def stop(timeout: float = 20.0) -> tuple[bool, str]:
    """SIGTERM to the router supervisor (it stops vllm-router), verified by pid and start time."""
    st = status()
    pid = st.get("supervisor_pid")
    if not pid:
        return True, "no router is running"
    try:
        os.kill(int(pid), signal.SIGTERM)
    except ProcessLookupError:
        return True, "the router had already stopped"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not _alive(pid, st.get("supervisor_create_time")):
            router_pid = st.get("pid")
            import psutil  # only this path needs it (start-up, or a cycle)

            if router_pid and psutil.pid_exists(int(router_pid)):
                return False, f"the router supervisor exited but vllm-router pid {router_pid} still runs"
            return True, f"router stopped ({st.get('url')})"
        time.sleep(0.1)
    return False, f"the router supervisor (pid {pid}) did not exit within {timeout:.0f} s"
