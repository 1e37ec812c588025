"""What the cluster commands and the console's cluster view do: a row per box, drain / undrain,
serve / stop / restart one box or all of them (a rolling restart), and the share of traffic.

A box is known through its own `qwen-tui status --json` (run over its transport) and its own
/metrics (running, waiting, vllm:request_success_total); the router through /readiness and /workers.
Blocking; the console calls these from a worker thread.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from backend.cluster import router as rt
from backend.cluster import transport
from backend.cluster.config import Box, Cluster
from backend.metrics import MetricsError, fetch

StepFn = Callable[[str], None]


@dataclass
class BoxRow:
    name: str
    api_url: str
    transport: str
    reachable: bool = False
    state: str | None = None
    error: str | None = None
    in_router: bool | None = None  # None: no router, or it could not be asked
    router_healthy: bool | None = None
    breaker_open: bool | None = None  # the router's circuit breaker for it (vllm_router_cb_state != 0)
    drained: bool = False
    healthy: bool = False  # its own /health answers 200
    running: float | None = None
    waiting: float | None = None
    requests_total: float | None = None  # vllm:request_success_total
    share: float | None = None
    kv_tokens: int | None = None
    max_concurrency: float | None = None
    gpu: list[dict[str, Any]] | None = None
    uptime_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RouterView:
    kind: str
    url: str | None
    reachable: bool = False
    ready: bool = False
    healthy_workers: int | None = None
    total_workers: int | None = None
    error: str | None = None
    supervisor: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ClusterStatus:
    router: RouterView
    boxes: list[BoxRow]
    share_basis: str = "since each box started"
    at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"router": self.router.to_dict(), "boxes": [b.to_dict() for b in self.boxes],
                "share_basis": self.share_basis}

    @property
    def all_healthy(self) -> bool:
        return all(b.healthy and b.router_healthy is not False for b in self.boxes)


BOX_FIELDS = ("reachable", "state", "kv_tokens", "max_concurrency", "gpu", "uptime_s", "error")


def _box_row(cluster: Cluster, box: Box, last: BoxRow | None = None) -> BoxRow:
    """The box's own `status --json` (through its transport) and its /health and /metrics; with
    `last`, the status fields are last time's and only the HTTP reads are made (a status over ssh
    is a process and a connection per box: the console asks for it less often)."""
    row = BoxRow(name=box.name, api_url=box.api_url, transport=box.transport)
    if last is not None:
        for f in BOX_FIELDS:
            setattr(row, f, getattr(last, f))
    ans = transport.run(box, ["status", "--json"], cluster.command_timeout_s) if last is None else None
    if ans is None:
        pass
    elif ans.data is None:
        row.error = ans.error
    else:
        st = ans.data
        row.reachable = True
        row.state = st.get("state")
        row.kv_tokens = st.get("kv_cache_tokens")
        row.max_concurrency = st.get("max_concurrency")
        row.gpu = st.get("gpu")
        row.uptime_s = st.get("uptime_s")
        if st.get("failure"):
            f = st["failure"]
            row.error = f"{f.get('kind')}: {f.get('message')}"
    row.healthy = rt.box_healthy(box.api_url, timeout=2.0)
    if row.healthy:
        try:
            m = fetch(box.api_url, timeout=2.0)
            row.running, row.waiting, row.requests_total = m.running, m.waiting, m.requests_finished
        except MetricsError as e:
            row.error = row.error or str(e)
    return row


def router_view(cluster: Cluster) -> tuple[RouterView, dict[str, dict[str, Any]] | None]:
    view = RouterView(kind=cluster.router, url=cluster.router_url if cluster.router != "none" else None)
    if cluster.router == "none":
        return view, None
    view.supervisor = {k: v for k, v in rt.status().items() if k in ("state", "supervisor_pid", "pid", "restarts",
                                                                      "detail", "note", "left_out")}
    c = rt.RouterClient(cluster.router_url, timeout=2.0)
    try:
        r = c.readiness()
        view.reachable = True
        view.ready, view.healthy_workers, view.total_workers = r["ready"], r["healthy_workers"], r["total_workers"]
        workers = c.workers()
        if workers:  # the count from the same answer as the rows' health: /readiness, asked a moment
            # before, said "2/2 workers healthy" beside a row the router had just marked UNHEALTHY
            view.healthy_workers = sum(1 for w in workers.values() if w.get("is_healthy"))
            view.total_workers = len(workers)
        breakers = c.breakers(cluster.router_metrics_url)
        for url, w in workers.items():
            w["cb_state"] = breakers.get(url)
        return view, workers
    except rt.RouterError as e:
        view.error = str(e)
        return view, None
    finally:
        c.close()


def status(cluster: Cluster, last: ClusterStatus | None = None) -> ClusterStatus:
    """One row per box (asked in parallel) and the router's view of them. With `last`, each box's
    own status is not asked again (see _box_row): only /health, /metrics and the router."""
    before = {b.name: b for b in last.boxes} if last is not None else {}
    with ThreadPoolExecutor(max_workers=min(8, len(cluster.boxes) + 1)) as pool:
        rows_f = [pool.submit(_box_row, cluster, b, before.get(b.name)) for b in cluster.boxes]
        view_f = pool.submit(router_view, cluster)
        rows = [f.result() for f in rows_f]
        view, workers = view_f.result()
    out = rt.drained()
    for row in rows:
        row.drained = row.name in out
        if workers is not None:
            w = workers.get(row.api_url)
            row.in_router = w is not None
            row.router_healthy = bool(w.get("is_healthy")) if w else None
            cb = w.get("cb_state") if w else None
            row.breaker_open = None if cb is None else cb != 0
    shares(rows)
    return ClusterStatus(router=view, boxes=rows)


def shares(rows: list[BoxRow], before: dict[str, float] | None = None) -> None:
    """Each box's share of the finished requests: since `before` (name -> total) when given,
    else since each box started."""
    base = before or {}
    deltas = {r.name: (r.requests_total - base.get(r.name, 0.0)) for r in rows if r.requests_total is not None}
    total = sum(d for d in deltas.values() if d > 0)
    for r in rows:
        d = deltas.get(r.name)
        r.share = round(max(d, 0.0) / total, 4) if d is not None and total > 0 else None


def totals(cluster: Cluster) -> dict[str, float | None]:
    """vllm:request_success_total per box, straight from each box's /metrics (None: unreadable)."""
    def one(box: Box) -> float | None:
        try:
            return fetch(box.api_url, timeout=2.0).requests_finished
        except MetricsError:
            return None

    with ThreadPoolExecutor(max_workers=min(8, len(cluster.boxes))) as pool:
        return dict(zip([b.name for b in cluster.boxes], pool.map(one, cluster.boxes), strict=True))


def share_between(before: dict[str, float | None], after: dict[str, float | None]) -> dict[str, dict[str, Any]]:
    """{box: {requests, share}} from two `totals()` reads (a box restarted between them counts from 0)."""
    delta: dict[str, float | None] = {}
    for name, a in after.items():
        b = before.get(name)
        delta[name] = None if a is None else (a - b if b is not None and a >= b else a)
    total = sum(d for d in delta.values() if d)
    return {n: {"requests": None if d is None else int(d),
                "share": round(d / total, 4) if d is not None and total else None} for n, d in delta.items()}


# -- actions -----------------------------------------------------------------------------------------
class ClusterError(Exception):
    """An action on the cluster that could not be done; the message says why and what to do."""


def _say(on_step: StepFn | None, text: str) -> None:
    if on_step:
        on_step(text)


def _running(box: Box) -> float | None:
    try:
        return fetch(box.api_url, timeout=2.0).running
    except MetricsError:
        return None


def _wait_for_the_others(cluster: Cluster, c: rt.RouterClient, box: Box, limit: float,
                         on_step: StepFn | None) -> None:
    """Before a box leaves the router, at least one other box must take its traffic: healthy in
    /workers with its circuit breaker closed (an open breaker, e.g. just after that box was
    killed, answers 503 "No available workers" until the breaker's timeout). Waits up to `limit`."""
    t0, said = time.time(), False
    while True:
        workers = c.workers()
        if box.api_url not in workers:
            return  # already out: nothing changes for the traffic
        breakers = c.breakers(cluster.router_metrics_url)
        others = [u for u, w in workers.items() if u != box.api_url and w.get("is_healthy")]
        ready = [u for u in others if breakers.get(u, 0.0) == 0.0]
        if ready:
            return
        if not others:
            raise ClusterError(f"{box.name} is the only healthy box in the router: draining it stops the service "
                               "(--force to drain anyway)")
        if time.time() - t0 > limit:
            raise ClusterError(f"the other boxes' circuit breakers stayed open for {limit:g} s: {box.name} "
                               "not drained (--force to drain anyway)")
        if not said:
            _say(on_step, f"{box.name}: waiting for another box's circuit breaker to close first")
            said = True
        time.sleep(0.5)


def drain(cluster: Cluster, name: str, on_step: StepFn | None = None, force: bool = False,
          timeout: float | None = None) -> dict[str, Any]:
    """Take the box out of the router, then wait until its running requests reach 0 (or the timeout)."""
    box = cluster.box(name)
    if cluster.router == "none":
        raise ClusterError("cluster.router = \"none\": there is no router to drain a box from")
    limit = cluster.drain_timeout_s if timeout is None else timeout
    c = rt.RouterClient(cluster.router_url)
    try:
        if not force:
            _wait_for_the_others(cluster, c, box, limit, on_step)
        rt.set_drained(name, True)
        c.remove_worker(box.api_url)
    except rt.RouterError as e:
        raise ClusterError(str(e)) from None
    finally:
        c.close()
    _say(on_step, f"{name}: removed from the router; waiting for its running requests to finish")
    t0 = time.time()
    running = _running(box)
    while running and time.time() - t0 < limit:
        time.sleep(0.2)
        running = _running(box)
    waited = round(time.time() - t0, 2)
    timed_out = bool(running)
    _say(on_step, f"{name}: drained in {waited} s" if not timed_out else
         f"{name}: still {running:.0f} running after {limit:g} s (drain_timeout_s)")
    return {"ok": True, "box": name, "waited_s": waited, "running_left": running, "timed_out": timed_out}


def undrain(cluster: Cluster, name: str, on_step: StepFn | None = None,
            timeout: float | None = None) -> dict[str, Any]:
    """Wait for the box's own /health to answer 200, then add it back to the router."""
    box = cluster.box(name)
    if cluster.router == "none":
        raise ClusterError("cluster.router = \"none\": there is no router to add a box to")
    limit = cluster.ready_timeout_s if timeout is None else timeout
    t0 = time.time()
    while not rt.box_healthy(box.api_url):
        if time.time() - t0 > limit:
            raise ClusterError(f"{name}: {box.api_url}/health did not answer 200 within {limit:g} s; "
                               "not added to the router (start it: qwen-tui cluster serve --box " + name + ")")
        time.sleep(0.3)
    c = rt.RouterClient(cluster.router_url)
    try:
        c.add_worker(box.api_url, timeout=max(30.0, cluster.health_interval_s * 4))
        rt.set_drained(name, False)
        ok = box.api_url in c.workers()
    except rt.RouterError as e:
        raise ClusterError(str(e)) from None
    finally:
        c.close()
    waited = round(time.time() - t0, 2)
    _say(on_step, f"{name}: back in the router after {waited} s")
    return {"ok": ok, "box": name, "waited_s": waited}


def serve_box(cluster: Cluster, name: str, on_step: StepFn | None = None) -> dict[str, Any]:
    box = cluster.box(name)
    _say(on_step, f"{name}: starting (waiting up to {cluster.ready_timeout_s:g} s for READY)")
    args = ["serve", "--detach", "--wait", str(cluster.ready_timeout_s), "--json"]
    ans = transport.run(box, args + (["--allow-orphans"] if cluster.allow_orphans else []),
                        cluster.ready_timeout_s + 60)
    st = ans.data or {}
    ok = ans.rc == 0 and st.get("state") == "ready"
    if not ok and "already supervised" in ans.stderr:  # it runs already: fine once it is READY
        now = transport.run(box, ["status", "--json"], cluster.command_timeout_s).data or {}
        st, ok = now, now.get("state") == "ready"
    error = None if ok else (ans.error or (ans.stderr.strip().splitlines() or [f"state {st.get('state')}"])[-1])
    _say(on_step, f"{name}: {'ready' if ok else 'not ready: ' + str(error)}")
    return {"ok": ok, "box": name, "state": st.get("state"), "error": error}


def stop_box(cluster: Cluster, name: str, on_step: StepFn | None = None) -> dict[str, Any]:
    box = cluster.box(name)
    ans = transport.run(box, ["stop", "--json"], cluster.command_timeout_s + 90)
    st = ans.data or {}
    ok = bool(st.get("ok")) and ans.rc == 0
    _say(on_step, f"{name}: {st.get('summary') or ans.error}")
    error = None if ok else ans.error or st.get("summary")
    return {"ok": ok, "box": name, "summary": st.get("summary"), "error": error}


def restart_box(cluster: Cluster, name: str, on_step: StepFn | None = None, force: bool = False) -> dict[str, Any]:
    """drain -> stop -> serve (READY) -> undrain; without a router, stop -> serve."""
    steps: dict[str, Any] = {"box": name}
    if cluster.router != "none":
        steps["drain"] = drain(cluster, name, on_step, force=force)
    steps["stop"] = stop_box(cluster, name, on_step)
    steps["serve"] = serve_box(cluster, name, on_step)
    if not steps["serve"]["ok"]:
        steps["ok"] = False
        steps["error"] = f"{name} did not come back READY: {steps['serve']['error']} (left drained)"
        return steps
    if cluster.router != "none":
        steps["undrain"] = undrain(cluster, name, on_step)
    steps["ok"] = all(s.get("ok", True) for s in steps.values() if isinstance(s, dict))
    return steps


def rolling_restart(cluster: Cluster, on_step: StepFn | None = None, force: bool = False) -> dict[str, Any]:
    """One box at a time; stops at the first box that does not come back (the others keep serving)."""
    t0 = time.time()
    done: list[dict[str, Any]] = []
    for box in cluster.boxes:
        _say(on_step, f"rolling restart: {box.name} ({len(done) + 1}/{len(cluster.boxes)})")
        try:
            r = restart_box(cluster, box.name, on_step, force=force)
        except ClusterError as e:
            r = {"box": box.name, "ok": False, "error": str(e)}
        done.append(r)
        if not r["ok"]:
            break
    ok = len(done) == len(cluster.boxes) and all(r["ok"] for r in done)
    return {"ok": ok, "boxes": done, "seconds": round(time.time() - t0, 1)}
