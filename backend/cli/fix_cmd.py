"""`qwen-tui fix [--yes] [--wait S] [--json]`: the last failure's fix as a settings diff with the
ledger's verdict (backend/fixes.py); with --yes, saved into the config file in use and the server
started again. Without --yes nothing is written.

Exit codes: 0 a fix is shown (or applied, and READY within --wait), or nothing failed; 1 no fix can be
applied (none is a settings change, the ledger says it fails too, the value is this run's --set or
profile) or the restart did not reach READY; 2 bad input."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

from backend.cli.options import load_settings
from backend.server.status import FAILING, ServerState


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


def current_failure(st: Any) -> Mapping[str, Any] | None:
    """The failure a fix answers: this attempt's, or while the supervisor retries, the last one's."""
    if st.failure:
        return dict(st.failure)
    if st.state in FAILING and st.last_failure:
        return dict(st.last_failure)
    return None


def with_fix(st: Any, args: argparse.Namespace) -> tuple[Any, Any]:
    """`status`'s view with the failure's fix as data (key "fix", null when none), and the Proposal."""
    failure = current_failure(st)
    if not failure:
        return st, None
    from backend import fixes  # only for a failed server: status stays quick without it

    prop = fixes.propose(failure, load_settings(args))
    return st.with_extra(fix=prop.to_dict() if prop else None), prop


def proposal_text(prop: Any) -> str:
    return format_proposal(prop) + ("\n  apply it: qwen-tui fix --yes (or f in the console)" if prop.applicable
                                    else f"\n  not applicable: {prop.blocked}")


def fix_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", action="store_true", help="save the fix into the config file and start the server again")
    p.add_argument("--wait", type=float, metavar="S", default=0,
                   help="with --yes: wait up to S seconds for READY (default: return once started)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def record(prop: Any, path: Any) -> None:
    """The fix in the events journal (backend/events.py: who changed what, in `qwen-tui events`)."""
    from backend import events  # only once a fix is saved

    events.record_event("fix", "saved", kind=prop.kind, path=str(path),
                        diff={c.dotted: [c.old, c.value] for c in prop.changes})


def cmd_fix(args: argparse.Namespace, wait_ready: Callable[[float, bool], int] | None = None) -> int:
    """`wait_ready`: serve --detach --wait's wait (backend/cli/commands.py passes its own)."""
    from backend import fixes, spawn  # start-up: a subcommand imports only what it runs
    from backend.errors import ConfigError
    from backend.server import client as supervisor_client  # start-up: a subcommand imports only what it runs

    if args.wait < 0 or (args.wait and not args.yes):
        print("qwen-tui: fix: --wait goes with --yes and is 0 or more seconds", file=sys.stderr)
        return 2
    settings = load_settings(args)
    st = supervisor_client.status()
    failure = current_failure(st)
    out: dict[str, Any] = {"state": str(st.state), "failure": failure, "fix": None, "applied": False}

    def done(rc: int, message: str) -> int:
        out["ok"], out["message"] = rc == 0, message
        if args.json:
            _print_json(out)
        else:
            print(message, file=sys.stdout if rc == 0 else sys.stderr)
        return rc

    if failure is None:
        return done(0, f"nothing to fix: the server is {st.state}")
    prop = fixes.propose(failure, settings)
    if prop is None:
        return done(1, f"{failure.get('kind')}: no settings change fixes it; the diagnosis says: {failure.get('fix')}")
    out["fix"] = prop.to_dict()
    if not args.json:
        print(format_proposal(prop))
    if not prop.applicable:
        return done(1, f"not applied: {prop.blocked}")
    if not args.yes:
        return done(0, "apply it and restart: qwen-tui fix --yes  (or f in the console)")
    try:
        path, _ = fixes.apply(prop, settings)
    except (ConfigError, ValueError) as e:
        return done(1, f"not saved: {e}")
    out["applied"], out["saved_to"] = True, str(path)
    record(prop, path)
    if st.supervisor_pid is not None:  # a supervisor still retrying the old settings
        supervisor_client.stop()
    try:
        data = supervisor_client.start_detached(spawn.origin_of(settings), allow_orphans=True)
    except RuntimeError as e:
        return done(1, f"saved to {path}; not started: {e}")
    out["started"] = {"supervisor_pid": data.get("supervisor_pid"), "log_path": data.get("log_path")}
    if not args.wait:
        return done(0, f"saved to {path}; started again (supervisor pid {data.get('supervisor_pid')})")
    rc = wait_ready(args.wait, True) if wait_ready else 1
    final = supervisor_client.status()
    out["status"] = final.to_dict()
    if rc == 0 and final.state is ServerState.READY:
        return done(0, f"saved to {path}; READY")
    return done(1, f"saved to {path}; not READY: {final.state}")


def format_proposal(prop: Any) -> str:
    lines = [f"fix for {prop.kind}: {prop.why}"]
    lines += [f"  {d}" for d in (c.diff() for c in prop.changes)]
    if prop.verdict:
        lines.append(f"  {prop.verdict['text']}")
    lines += [f"  note: {n}" for n in prop.notes]
    if prop.target:
        lines.append(f"  saved into: {prop.target}")
    return "\n".join(lines)
