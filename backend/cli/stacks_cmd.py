"""`qwen-tui stacks [--pid N] [--json]`: dump the stacks of every process of the supervised server (or
the pids given) with py-spy, save the dump (backend/stacks.py) for `qwen-tui report`, and print it.
Exit 0 when dumped, 1 when there is no server process to dump, 2 for a pid that does not exist."""

from __future__ import annotations

import argparse
import json
import os
import sys


def stacks_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pid", type=int, action="append", metavar="N", help="this process instead (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def cmd_stacks(args: argparse.Namespace) -> int:
    from backend import stacks  # start-up: a subcommand imports only what it runs
    from backend.server import statefile  # start-up: a subcommand imports only what it runs

    state = statefile.read() or {}
    pids = args.pid or stacks.server_pids(state)
    for pid in args.pid or []:
        if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
            print(f"qwen-tui: stacks: no process {pid}", file=sys.stderr)
            return 2
    if not pids:
        print("qwen-tui: stacks: no server process to dump (is a server starting?)", file=sys.stderr)
        return 1
    d = stacks.dump(pids, log_path=None if args.pid else state.get("log_path"))
    path = stacks.save(d)
    if args.json:
        print(json.dumps({**d, "path": str(path)}, indent=2))
    else:
        sys.stdout.write(stacks.format_text(d))
        print(f"saved to {path} (qwen-tui report includes it)")
    return 0
