"""`qwen-tui host` and `qwen-tui history`: the host's memory now, and the flight recorder's past."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from backend.server import statefile


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


def _err(msg: str) -> None:
    print(f"qwen-tui: {msg}", file=sys.stderr)


def _gib(b: int | None) -> str:
    return "?" if b is None else f"{b / (1 << 30):.1f} GiB"


# -- host --------------------------------------------------------------------------------------
def cmd_host(args: argparse.Namespace) -> int:
    from backend import host  # start-up: a subcommand imports only what it runs
    from backend.server.sleep import sleep_fit, weights_bytes

    data, _why = statefile.read_live(cleanup=False)
    data = data or {}
    live = data.get("state") not in (None, "stopped")
    sup_pid = data.get("supervisor_pid") if live else None
    srv_pid = data.get("pid") if live else None
    tp = int(((data.get("settings") or {}).get("server") or {}).get("tensor_parallel_size") or 1)
    s = host.sample(sup_pid, srv_pid, cpu_window_s=0.25)
    weights = weights_bytes(data.get("figures"), None, tp) if live else None
    warning = sleep_fit(weights, s.ram_available_bytes, data.get("sleep_level"))
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


# -- history -----------------------------------------------------------------------------------
def _f(v: float | None, fmt: str, scale: float = 1.0) -> str:
    return "-" if v is None else format(v * scale, fmt)


def _ms(v: float | None, width: int = 0) -> str:
    return format("-" if v is None else f"{v * 1000:.0f}ms", f">{width}")


def _clock(t: float, span: float) -> str:
    import time  # one subcommand's need

    return time.strftime("%H:%M" if span <= 86400 else "%m-%d %H:%M", time.localtime(t))


def cmd_history(args: argparse.Namespace) -> int:
    from backend import history, recorder  # start-up: a subcommand imports only what it runs

    try:
        since = history.parse_since(args.since)
        win = history.load(recorder.db_path(statefile.state_path().parent), since)
    except history.HistoryError as e:
        _err(str(e))
        return 2
    if args.bins < 1 or args.bins > 1000:
        _err(f"--bins {args.bins}: give 1 to 1000")
        return 2
    if args.json:
        _print_json(history.to_json(win, args.bins))
        return 0
    if args.csv:
        import csv  # one subcommand's need

        w = csv.writer(sys.stdout)
        w.writerow(history.CSV_COLUMNS)
        w.writerows(history.csv_rows(win))
        return 0
    span = win.end - win.start
    if not win.samples and not win.events:
        print(f"no history in the last {args.since} (the supervisor records while it runs: "
              f"{recorder.db_path(statefile.state_path().parent)})")
        return 0
    print(f"{'from':>11} {'run':>4} {'wait':>4} {'KV%':>4} {'tok/s':>7} {'TTFT p50':>9} {'p99':>7} "
          f"{'queue p99':>9} {'err':>4} {'pre':>4} {'W':>5}")
    for b in history.bins(win, args.bins):
        if not b["samples"]:
            print(f"{_clock(b['start'], span):>11}  (no samples)")
            continue
        print(f"{_clock(b['start'], span):>11} {_f(b['running_max'], '4.0f')} {_f(b['waiting_max'], '4.0f')} "
              f"{_f(b['kv_cache_usage_max'], '4.0f', 100)} {_f(b['generation_tokens_per_s'], '7.1f')} "
              f"{_ms(b['ttft_p50_s'], 9)} {_ms(b['ttft_p99_s'], 7)} {_ms(b['queue_p99_s'], 9)} "
              f"{b['http_errors']:>4} {b['preemptions']:>4.0f} {_f(b['gpu_power_w_mean'], '5.0f')}")
    tot = history.summarize(win.samples)
    http = ", ".join(f"{k} {v}" for k, v in tot["http_requests"].items()) or "none"
    print(f"total: {tot['requests_finished']:.0f} requests finished, {tot['preemptions']:.0f} preemptions, "
          f"TTFT p50 {_ms(tot['ttft_p50_s'])} p99 {_ms(tot['ttft_p99_s'])}")
    print(f"HTTP {http}")
    for ev in win.events:
        line = f"event {_clock(ev['t'], 0)}:{int(ev['t']) % 60:02d} {ev['kind']}: {ev['detail'] or ''}"
        print(line if len(line) <= 80 else line[:79] + "…")
    return 0


def _history_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", default="1h", metavar="DURATION", help="how far back: 30m, 12h, 2d (default 1h)")
    p.add_argument("--bins", type=int, default=12, metavar="N", help="rows of the table, slices of --json (12)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object (summary, bins, samples, events)")
    out.add_argument("--csv", action="store_true", help="print every sample and event as CSV")


def _no_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


COMMANDS = {
    "history": (cmd_history, "the flight recorder: requests, KV cache, tok/s, TTFT, HTTP errors, GPU power "
                "and the server's events over the last hours", _history_args),
    "host": (cmd_host, "the host's CPU load, RAM, swap and the server's RSS; warns when a level-1 sleep "
             "would not fit in RAM", _no_args),
}
