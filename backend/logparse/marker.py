"""The launch marker: the first line the supervisor writes into each server log, before vLLM prints anything.

    qwen-tui: launch at 2026-12-01 06:56:04.412 (unix 1764572164.412) pid 1037 argv: /venv/bin/vllm serve ...

vLLM's own first line comes 10-30 s later (imports), so a timeline anchored at the first vLLM line is short by
that much; with the marker the parser anchors it at the launch. The local time is written in the same clock as
vLLM's log stamps (the server inherits the supervisor's time zone), the unix time for callers that feed lines
with their own `time.time()`. Secrets on the command line (--api-key ...) are written as "***".
"""

from __future__ import annotations

import calendar
import re
import shlex
import time
from typing import NamedTuple

PREFIX = "qwen-tui: launch at "
_MARKER = re.compile(
    r"qwen-tui: launch at (\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(\.\d+)? \(unix (\d+(?:\.\d+)?)\)"
    r"(?: pid (\d+))?(?: argv: (.*))?$"
)
_SECRET_WORDS = ("key", "token", "secret", "password")


class Launch(NamedTuple):
    local: float        # the launch in vLLM's log clock (local wall time read as if UTC, as the parser reads stamps)
    unix: float
    year: int
    pid: int | None
    argv: list[str]


def launch_marker(t: float, pid: int | None, argv: list[str]) -> str:
    """The marker line (with its newline) for a launch at unix time `t` of process `pid` running `argv`."""
    lt = time.localtime(t)
    frac = f"{t % 1:.3f}"[1:]
    shown: list[str] = []
    hide = False
    for arg in argv:
        if hide:
            shown.append("***")
            hide = False
            continue
        flag, eq, _ = arg.partition("=")
        secret = flag.startswith("--") and any(w in flag.lower() for w in _SECRET_WORDS)
        shown.append(f"{flag}=***" if secret and eq else arg)
        hide = secret and not eq
    pid_part = f" pid {pid}" if pid is not None else ""
    return (f"{PREFIX}{time.strftime('%Y-%m-%d %H:%M:%S', lt)}{frac} (unix {t:.3f}){pid_part} "
            f"argv: {shlex.join(shown)}\n")


def parse_marker(line: str) -> Launch | None:
    m = _MARKER.match(line.rstrip())
    if not m:
        return None
    try:
        y, mo, d, h, mi, s = (int(x) for x in m.group(1, 2, 3, 4, 5, 6))
        local = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + float(m.group(7) or 0)
        argv = shlex.split(m.group(10) or "")
    except (ValueError, OverflowError):
        return None
    return Launch(local, float(m.group(8)), y, int(m.group(9)) if m.group(9) else None, argv)


def server_python(argv: list[str]) -> str | None:
    """The interpreter that runs the server: argv[0] itself, or the `python` beside a `vllm` script."""
    if not argv:
        return None
    exe = argv[0]
    base = exe.rpartition("/")[2]
    if base.startswith("python"):
        return exe
    if base == "vllm" and "/" in exe:
        return exe.rpartition("/")[0] + "/python"
    return None
