"""`qwen-tui host` and `qwen-tui history`: the host's memory now, and the flight recorder's past."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from backend import statefile


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


def _err(msg: str) -> None:
    print(f"qwen-tui: {msg}", file=sys.stderr)


def _gib(b: int | None) -> str:
    return "?" if b is None else f"{b / (1 << 30):.1f} GiB"


# -- host --------------------------------------------------------------------------------------
def cmd_host(args: argparse.Namespace) -> int:
    from backend import host  # start-up: a subcommand imports only what it runs

    data, _why = statefile.read_live(cleanup=False)
    data = data or {}
    live = data.get("state") not in (None, "stopped")
    sup_pid = data.get("supervisor_pid") if live else None
    srv_pid = data.get("pid") if live else None
    tp = int(((data.get("settings") or {}).get("server") or {}).get("tensor_parallel_size") or 1)
    s = host.sample(sup_pid, srv_pid, cpu_window_s=0.25)
    weights = host.weights_bytes(data.get("figures"), None, tp) if live else None
    warning = host.sleep_fit(weights, s.ram_available_bytes, data.get("sleep_level"))
    out = host.summary(s)
    out.update(server_state=data.get("state"), weights_bytes=weights, sleep_fit_warning=warning)
    if args.json:
        _print_json(out)
        return 0
    load = "?" if s.load_1m is None else f"{s.load_1m:.2f}"
    cpu = "" if s.cpu_percent is None else f", {s.cpu_percent:.0f} % busy"
    print(f"CPU: load {load} over {s.cpu_count} cores{cpu}")
    print(f"RAM: {_gib(s.ram_used_bytes)} used, {_gib(s.ram_available_bytes)} available of {_gib(s.ram_total_bytes)}")
    print(f"swap: {_gib(s.swap_used_bytes)} used of {_gib(s.swap_total_bytes)}")
    for p in s.procs:
        print(f"  {p.role:<11} pid {p.pid:<8} RSS {_gib(p.rss_bytes)}")
    if not s.procs:
        print("  no supervised server")
    if warning:
        print(f"warning: {warning}")
    return 0


def _no_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


COMMANDS = {
    "host": (cmd_host, "the host's CPU load, RAM, swap and the server's RSS; warns when a level-1 sleep "
             "would not fit in RAM", _no_args),
}
