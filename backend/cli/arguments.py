"""The arguments of the headless subcommands in backend/cli/commands.py (argparse), one function a command."""

from __future__ import annotations

import argparse

from backend.cli.options import positive_int


def events_args(p: argparse.ArgumentParser) -> None:
    from backend.events import add_args  # start-up: a subcommand imports only what it runs

    add_args(p)


def pull_args(p: argparse.ArgumentParser) -> None:
    from backend.cli.pull_cmd import add_args  # start-up: a subcommand imports only what it runs

    add_args(p)


def no_args(p: argparse.ArgumentParser) -> None:
    pass


def print_command_args(p: argparse.ArgumentParser) -> None:
    json_arg(p)
    p.add_argument("--show-secrets", action="store_true", help="show VLLM_API_KEY instead of <hidden>")


def gen_key_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--file", metavar="PATH", help="where to write it (default: the config dir's api_key)")
    p.add_argument("--force", action="store_true", help="replace an existing key file")
    p.add_argument("--show-secrets", action="store_true", help="also print the key")


def json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


def doctor_args(p: argparse.ArgumentParser) -> None:
    json_arg(p)
    p.add_argument("--p2p", action="store_true", help="instead: all-reduce a known tensor between the GPUs (one "
                   "process per rank) as configured, without P2P and with vLLM's custom all-reduce; gloo on the CPU")
    p.add_argument("--timeout", type=float, metavar="S", help="with --p2p: seconds each mode may take (default 60)")


def serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--detach", action="store_true", help="run the supervisor in the background")
    p.add_argument("--wait", type=float, metavar="S", default=0,
                   help="with --detach: wait up to S seconds for READY")
    p.add_argument("--quiet", action="store_true", help="do not print the server log")
    p.add_argument("--restart", choices=("on-failure", "never"), help="override console.restart")
    p.add_argument("--allow-orphans", action="store_true",
                   help="start even when vLLM processes no console owns are running")
    p.add_argument("--json", action="store_true",
                   help="with --detach: print the server's status as one JSON object when done")


def stop_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--orphans", action="store_true",
                   help="kill the vLLM/GPU processes that no console owns (the pids listed, nothing else)")
    p.add_argument("--pid", type=positive_int, action="append", metavar="N",
                   help="with --orphans: kill only this pid (repeatable); it must be one of those found")
    p.add_argument("--list", action="store_true", help="list the orphans, kill nothing")
    json_arg(p)


def sleep_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--level", type=int, choices=(1, 2), default=1,
                   help="1: weights to CPU RAM, KV cache dropped (default); 2: both dropped")
    json_arg(p)


def report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="FILE", help="write the report to FILE instead of printing it")
    p.add_argument("--no-redact", action="store_true",
                   help="keep home paths, user and host names, IP addresses, keys and tokens, the model path")
    json_arg(p)


def logs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    p.add_argument("-n", type=int, default=50, help="lines to print first (default 50)")
    p.add_argument("--attempt", type=positive_int, metavar="N",
                   help="the log of attempt N of the server (1 = first launch; see status --json attempts)")


def parse_log_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE|-", nargs="?", help="a vLLM log file, or - for standard input")
    p.add_argument("--attempt", type=positive_int, metavar="N",
                   help="instead of FILE: the server's log of attempt N (see status --json attempts)")
    json_arg(p)


def bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=32, metavar="N", help="requests to send (default 32)")
    p.add_argument("--concurrency", type=int, default=8, metavar="C", help="most in flight (default 8)")
    p.add_argument("--max-tokens", type=int, default=128, metavar="K",
                   help="output tokens per request, EOS ignored (default 128)")
    p.add_argument("--prompt-tokens", type=int, default=128, metavar="P",
                   help="about this many prompt tokens per request (default 128)")
    p.add_argument("--url", metavar="URL", help="another server than the configured one, e.g. the cluster's "
                   "router; with [cluster], each box's share of the requests")
    p.add_argument("--sweep", metavar="C1,C2,...", help="a concurrency sweep: one load test per level, "
                   "e.g. 1,4,8,16,32 (saved as JSON and CSV in the XDG data dir)")
    p.add_argument("--input-tokens", type=int, metavar="N", help="with --sweep: prompt tokens (default 200)")
    p.add_argument("--output-tokens", type=int, metavar="N", help="with --sweep: output tokens (default 500)")
    p.add_argument("--requests-per-level", type=int, metavar="N",
                   help="with --sweep: requests at each level (default max(4, 2 x the level))")
    p.add_argument("--csv", metavar="FILE", help="with --sweep: also write the table as CSV to FILE")
    json_arg(p)
