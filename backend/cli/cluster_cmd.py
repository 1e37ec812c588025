"""`qwen-tui cluster ...` and `qwen-tui router ...`: the headless side of several boxes behind a router.

Exit codes as everywhere: 0 ok, 1 the thing is not ok (a box unreachable, a step failed), 2 bad input
(no [cluster], an unknown box).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any, Callable

from backend.cli.options import global_options, load_settings
from backend.cluster import ops
from backend.cluster import router as rt
from backend.cluster.config import Cluster, require
from backend.spawn import Origin, origin_of_options


def _print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, default=str))


def _err(msg: str) -> None:
    print(f"qwen-tui: {msg}", file=sys.stderr)


def _cluster(args: argparse.Namespace) -> Cluster:
    return require(load_settings(args))


def _origin(args: argparse.Namespace) -> Origin:
    return origin_of_options(args)


def _steps(args: argparse.Namespace) -> ops.StepFn | None:
    return None if args.json else (lambda text: print(text, file=sys.stderr, flush=True))


def _fmt(x: float | None, spec: str = ".0f") -> str:
    return "-" if x is None else format(x, spec)


def status_lines(st: ops.ClusterStatus) -> list[str]:
    r = st.router
    if r.kind == "none":
        head = "router: none (boxes only)"
    elif not r.reachable:
        head = f"router: {r.url} unreachable ({r.error}); supervisor {r.supervisor.get('state')}"
    else:
        head = (f"router: {r.url} {'ready' if r.ready else 'NOT READY'}, {r.healthy_workers}/{r.total_workers} "
                f"workers healthy")
    out = [head, f"{'box':<10} {'state':<9} {'health':<7} {'router':<10} {'run':>4} {'wait':>4} {'KV tokens':>10} "
                 f"{'max conc':>8} {'share':>6}  error"]
    for b in st.boxes:
        if b.in_router is None:
            where = "-"
        elif not b.in_router:
            where = "drained" if b.drained else "-"
        elif not b.router_healthy:
            where = "unhealthy"
        else:
            where = "breaker open" if b.breaker_open else "healthy"
        share = "-" if b.share is None else f"{b.share * 100:.0f}%"
        out.append(f"{b.name:<10} {b.state or '?':<9} {'ok' if b.healthy else 'down':<7} {where:<10} "
                   f"{_fmt(b.running):>4} {_fmt(b.waiting):>4} {_fmt(b.kv_tokens, ',d') if b.kv_tokens else '-':>10} "
                   f"{_fmt(b.max_concurrency, '.1f'):>8} {share:>6}  "
                   f"{b.error or ''}")
    out.append(f"(share: of vllm:request_success_total, {st.share_basis})")
    return out


def cmd_cluster_status(args: argparse.Namespace) -> int:
    st = ops.status(_cluster(args))
    if args.json:
        _print_json(st.to_dict())
    else:
        print("\n".join(status_lines(st)))
    return 0 if st.all_healthy and (st.router.kind == "none" or st.router.ready) else 1


def _box_or_all(cluster: Cluster, name: str | None) -> list[str]:
    return [cluster.box(name).name] if name else [b.name for b in cluster.boxes]


def _router_running() -> bool:
    return rt.status().get("state") in ("running", "restarting")


def cmd_cluster_serve(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    results = []
    for name in _box_or_all(cluster, args.box):
        r = ops.serve_box(cluster, name, _steps(args))
        if r["ok"] and cluster.router != "none" and name in rt.drained() and _router_running():
            r["undrain"] = _safe(ops.undrain, cluster, name, _steps(args))
        results.append(r)
    router: dict[str, Any] | None = None
    if cluster.router != "none" and not args.box and not _router_running():
        try:
            router = rt.start_detached(_origin(args), cluster)
        except rt.RouterError as e:
            router = {"state": "failed", "error": str(e)}
            _err(str(e))
    ok = all(r["ok"] for r in results) and (router is None or router.get("state") == "running")
    if args.json:
        _print_json({"ok": ok, "boxes": results, "router": router})
    return 0 if ok else 1


def _safe(fn: Callable[..., dict[str, Any]], *a: Any, **kw: Any) -> dict[str, Any]:
    try:
        out: dict[str, Any] = fn(*a, **kw)
        return out
    except ops.ClusterError as e:
        _err(str(e))
        return {"ok": False, "error": str(e)}


def cmd_cluster_stop(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    results = []
    router: dict[str, Any] | None = None
    if not args.box and cluster.router != "none":
        ok, msg = rt.stop()
        router = {"ok": ok, "summary": msg}
        if not args.json:
            print(msg, file=sys.stderr)
    for name in _box_or_all(cluster, args.box):
        r: dict[str, Any] = {"box": name}
        if args.box and cluster.router != "none" and _router_running():
            r["drain"] = _safe(ops.drain, cluster, name, _steps(args), force=True)
        r.update(ops.stop_box(cluster, name, _steps(args)))
        results.append(r)
    ok = all(r["ok"] for r in results) and (router is None or router["ok"])
    if args.json:
        _print_json({"ok": ok, "boxes": results, "router": router})
    return 0 if ok else 1


def cmd_cluster_restart(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    try:
        if args.box:
            out = ops.restart_box(cluster, cluster.box(args.box).name, _steps(args), force=args.force)
        else:
            out = ops.rolling_restart(cluster, _steps(args), force=args.force)
    except ops.ClusterError as e:
        out = {"ok": False, "error": str(e)}
    if args.json:
        _print_json(out)
    elif not out["ok"]:
        _err(out.get("error") or next((b.get("error") for b in out.get("boxes", []) if not b["ok"]), "failed"))
    else:
        print(f"restarted{' ' + args.box if args.box else ' every box, one at a time'}"
              + (f" in {out['seconds']} s" if "seconds" in out else ""))
    return 0 if out["ok"] else 1


def cmd_cluster_drain(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    out = _safe(ops.drain, cluster, cluster.box(args.box).name, _steps(args), force=args.force, timeout=args.timeout)
    if args.json:
        _print_json(out)
    return 0 if out["ok"] and not out.get("timed_out") else 1


def cmd_cluster_undrain(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    out = _safe(ops.undrain, cluster, cluster.box(args.box).name, _steps(args), timeout=args.timeout)
    if args.json:
        _print_json(out)
    return 0 if out["ok"] else 1


# -- router -------------------------------------------------------------------------------------------
def cmd_router_print_command(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    try:
        argv = rt.command(cluster)
    except rt.RouterError as e:
        _err(str(e))
        return 2
    installed = rt.executable(cluster) is not None
    if args.json:
        _print_json({"argv": argv, "shell": shlex.join(argv), "installed": installed})
    else:
        if not installed:
            print("# note: vllm-router is not installed: pip install 'qwen-tui[router]'")
        print(shlex.join(argv))
    return 0


def cmd_router_serve(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    try:
        rt.command(cluster)
        if args.detach:
            st = rt.start_detached(_origin(args), cluster)
            if args.json:
                _print_json({"started": True, **st})
            else:
                print(f"router started: supervisor pid {st.get('supervisor_pid')}, vllm-router pid {st.get('pid')}, "
                      f"{st.get('url')}\nlog: {st.get('log_path')}")
            return 0
        st = rt.status()
        if st.get("state") in ("running", "restarting"):
            _err(f"a router supervisor already runs (pid {st.get('supervisor_pid')}); `qwen-tui router stop` first")
            return 1
        sup = rt.RouterSupervisor(cluster)
        sup.install_signal_handlers()
        if not args.quiet:
            print(f"router: {shlex.join(rt.command(cluster))}\nlog: {sup.log_path}", file=sys.stderr, flush=True)
        return sup.run()
    except rt.RouterError as e:
        _err(str(e))
        if args.json:
            _print_json({"started": False, "error": str(e)})
        return 1


def cmd_router_stop(args: argparse.Namespace) -> int:
    ok, msg = rt.stop()
    if args.json:
        _print_json({"ok": ok, "summary": msg})
    else:
        print(msg)
    return 0 if ok else 1


def cmd_router_status(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    view, workers = ops.router_view(cluster)
    out = {**view.to_dict(), "workers": workers}
    if args.json:
        _print_json(out)
    else:
        print(f"router {view.url}: supervisor {view.supervisor.get('state')}, "
              + (f"{'ready' if view.ready else 'not ready'}, {view.healthy_workers}/{view.total_workers} healthy"
                 if view.reachable else f"unreachable ({view.error})"))
        for url, w in (workers or {}).items():
            print(f"  {url}: {'healthy' if w.get('is_healthy') else 'UNHEALTHY'}")
    return 0 if view.ready else 1


# -- parsers --------------------------------------------------------------------------------------------
def _json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _sub(parent: argparse.ArgumentParser, table: dict[str, Any]) -> None:
    subs = parent.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    for name, (func, help_text, add) in table.items():
        sp = subs.add_parser(name, help=help_text, description=help_text)
        global_options(sp, sub=True)
        add(sp)
        _json(sp)
        sp.set_defaults(action_func=func)


def _box_opt(required: bool) -> Callable[[argparse.ArgumentParser], None]:
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("--box", metavar="NAME", required=required, help="the box, by its [[cluster.box]] name")
    return add


def _restart_opts(p: argparse.ArgumentParser) -> None:
    _box_opt(False)(p)
    p.add_argument("--force", action="store_true", help="drain a box even when it is the only healthy one")


def _drain_opts(p: argparse.ArgumentParser) -> None:
    _box_opt(True)(p)
    p.add_argument("--timeout", type=float, metavar="S", help="override cluster.drain_timeout_s")
    p.add_argument("--force", action="store_true", help="drain a box even when it is the only healthy one")


def _undrain_opts(p: argparse.ArgumentParser) -> None:
    _box_opt(True)(p)
    p.add_argument("--timeout", type=float, metavar="S", help="how long to wait for its /health (default "
                   "cluster.ready_timeout_s)")


def _router_serve_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--detach", action="store_true", help="run the router supervisor in the background")
    p.add_argument("--quiet", action="store_true", help="say nothing but errors")


CLUSTER_ACTIONS = {
    "status": (cmd_cluster_status, "a row per box (its own status and /metrics) and the router's view", lambda p: None),
    "serve": (cmd_cluster_serve, "start every box (or --box NAME) and, for all, the router", _box_opt(False)),
    "stop": (cmd_cluster_stop, "stop the router and every box (or drain and stop --box NAME)", _box_opt(False)),
    "restart": (cmd_cluster_restart, "rolling restart, one box at a time: drain, restart, READY, undrain "
                                     "(or only --box NAME)", _restart_opts),
    "drain": (cmd_cluster_drain, "take a box out of the router and wait for its running requests to finish",
              _drain_opts),
    "undrain": (cmd_cluster_undrain, "wait for the box's /health, then add it back to the router", _undrain_opts),
}
ROUTER_ACTIONS = {
    "print-command": (cmd_router_print_command, "the exact vllm-router command line from [cluster]", lambda p: None),
    "serve": (cmd_router_serve, "run vllm-router under a supervisor (foreground unless --detach)", _router_serve_opts),
    "stop": (cmd_router_stop, "stop the router supervisor and vllm-router", lambda p: None),
    "status": (cmd_router_status, "the router's readiness and workers", lambda p: None),
}

def _dispatch(args: argparse.Namespace) -> int:
    rc: int = args.action_func(args)
    return rc


COMMANDS = {
    "cluster": (_dispatch, "several boxes behind a router: status, serve, stop, restart, drain, undrain",
                lambda p: _sub(p, CLUSTER_ACTIONS)),
    "router": (_dispatch, "the vllm-router in front of the boxes: print-command, serve, stop, status",
               lambda p: _sub(p, ROUTER_ACTIONS)),
}
