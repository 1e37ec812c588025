"""The journal: who did what to this state dir's server, and how it ended.

Each state dir keeps ``events.jsonl``, append-only JSON lines (one ``write`` per event, O_APPEND,
so writers in several processes never interleave within a line), rotated to ``events.jsonl.1``
past ROTATE_BYTES. An event: time, user, where from (tty, the SSH client address from the
environment), action (start, stop, restart, settings, sleep, wake, profile, kill, adopt, ready,
failed, stopped), outcome in words, and the action's own fields (pid, diff, seconds, kind...).

``record_event(...)`` never raises: a full disk or a read-only state dir must not stop a server.
``qwen-tui events [-n N] [--json]`` prints them (run_cli).
"""

from __future__ import annotations

import json
import os
import pwd
import sys
import time
from pathlib import Path
from typing import Any

from backend import paths
from backend.timefmt import ago

ROTATE_BYTES = 1 << 20
FILE = "events.jsonl"
# past tense for "restarted by alice 12 min ago"
DONE = {"start": "started", "stop": "stopped", "restart": "restarted", "settings": "settings saved",
        "sleep": "put to sleep", "wake": "woken", "profile": "profile switched", "kill": "killed",
        "adopt": "adopted", "ready": "READY", "failed": "failed", "stopped": "stopped"}


def journal_path(state_dir: Path | None = None) -> Path:
    return (state_dir or paths.state_dir()) / FILE


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def origin(environ: dict[str, str] | None = None) -> dict[str, str | None]:
    """Where an action comes from: the terminal, and the SSH client's address (SSH_CLIENT)."""
    env = os.environ if environ is None else environ
    tty = env.get("QWEN_TUI_TTY")  # a detached supervisor has none: the console that started it passes its own
    if tty is None:
        for fd in (0, 1, 2):
            try:
                tty = os.ttyname(fd)
                break
            except OSError:
                continue
    ssh = (env.get("SSH_CLIENT") or env.get("SSH_CONNECTION") or "").split()
    return {"tty": tty, "ssh_client": ssh[0] if ssh else None}


def record_event(action: str, outcome: str | None = None, state_dir: Path | None = None,
                 **fields: Any) -> dict[str, Any] | None:
    """Append one event; return it, or None when it could not be written (never raises)."""
    event = {"time": round(time.time(), 3), "user": _user(), **origin(), "pid": os.getpid(), "action": action,
             "outcome": outcome, **fields}
    path = journal_path(state_dir)
    try:
        line = (json.dumps(event, default=str) + "\n").encode()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            if path.stat().st_size + len(line) > ROTATE_BYTES:
                os.replace(path, path.with_name(FILE + ".1"))
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        return None
    return event


def read_events(n: int | None = None, state_dir: Path | None = None) -> list[dict[str, Any]]:
    """The newest ``n`` events (all when None), oldest first; lines that are not JSON objects are
    skipped. Raises PermissionError when the journal exists but cannot be read."""
    path = journal_path(state_dir)
    out: list[dict[str, Any]] = []
    for p in (path.with_name(FILE + ".1"), path):
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict):
                out.append(item)
    return out[-n:] if n else out


def diff_text(diff: Any) -> str:
    """{"server.max_model_len": [8192, 16384]} -> "max_model_len 8192 → 16384"."""
    if not isinstance(diff, dict):
        return ""
    def shown(v: Any) -> str:
        return "(unset)" if v is None else str(v)  # a key not in the file, not Python's None

    return ", ".join(f"{str(k).split('.', 1)[-1]} {shown(v[0])} → {shown(v[1])}" for k, v in diff.items()
                     if isinstance(v, (list, tuple)) and len(v) == 2)


def describe(event: dict[str, Any], now: float | None = None) -> str:
    """"restarted by alice 12 min ago: max_model_len 8192 → 16384" (the status bar's last event)."""
    now = time.time() if now is None else now
    action = str(event.get("action"))
    when = ago(now - float(event.get("time") or now))
    text = f"{DONE.get(action, action)} by {event.get('user', '?')} {when}"
    detail = diff_text(event.get("diff")) or event.get("outcome") or ""
    return f"{text}: {detail}" if detail else text


def cells(event: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """One event's columns: when, who, from where (ssh client or tty), what, how it ended."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(event.get("time") or 0)))
    where = str(event.get("ssh_client") or event.get("tty") or "-")
    detail = diff_text(event.get("diff")) or event.get("outcome") or ""
    return stamp, str(event.get("user", "?")), where, str(event.get("action", "?")), str(detail)


def line(event: dict[str, Any]) -> str:
    """One row of `qwen-tui events`."""
    stamp, user, where, action, detail = cells(event)
    return f"{stamp}  {user:<10} {where:<16} {action:<9} {detail}"


_last: dict[str, Any] = {}  # the status bar's cache: (path, mtime) -> its text


def last_event_text(state_dir: Path | None = None, now: float | None = None) -> str:
    """The newest event in words ("" when none or unreadable); the file is read again only when it
    changed (a stat per call: the console's status bar asks five times a second)."""
    path = journal_path(state_dir)
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return ""
    if _last.get("key") != (str(path), mtime):
        try:
            newest = read_events(1, state_dir)
        except OSError:
            newest = []
        _last.update(key=(str(path), mtime), event=newest[-1] if newest else None)
    return describe(_last["event"], now) if _last.get("event") else ""


def run_cli(args: Any) -> int:
    try:
        events = read_events(args.n)
    except PermissionError:
        print(f"qwen-tui: cannot read {journal_path()}: permission denied (it is another user's)", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(events, indent=2, default=str))
        return 0
    if not events:
        print(f"no events yet ({journal_path()})")
    for e in events:
        print(line(e))
    return 0


def add_args(p: Any) -> None:
    p.add_argument("-n", type=int, default=None, metavar="N", help="only the newest N events")
    p.add_argument("--json", action="store_true", help="print them as one JSON array")
