"""A line's envelope, split from its message: timestamp, process tag, level, file; and the rank a tag names."""

from __future__ import annotations

from typing import Any

from backend.logparse import patterns
from backend.logparse.handler import ParseState

_MISSING = object()

Proc = tuple[Any, ...]  # a process tag: (name, extra, pid, ip)


def split(line: str) -> tuple[Proc | None, str | None, str | None, str | None, str]:
    """(process tag, level letter, "MM-DD HH:MM:SS", file:line, message) of a cleaned, non-empty line;
    None for what it lacks. An access-log line reads as level "D" with an empty message."""
    proc = None
    c = line[0]
    if c == "[" or c.isdigit():
        m = patterns.OUTER_TS.match(line)
        if m:
            line = line[m.end():]
            c = line[:1]
    if c == "(":
        m = patterns.PROC.match(line)
        if m:
            proc = m.group("name", "extra", "pid", "ip")
            line = line[m.end():]
            c = line[:1]
    lvl = None
    ts = None
    fileinfo = None
    msg = line
    if c in "DIWEC" and c:
        m = patterns.HDR.match(line)
        if m:
            lvl = c
            ts = m.group(2)
            fileinfo = m.group(3)
            msg = line[m.end():]
        else:
            m = patterns.UVICORN.match(line)
            if m:
                lvl = c
                msg = line[m.end():]
                if msg[:1].isdigit() and " HTTP/" in msg:  # an access-log line: nothing to read
                    lvl = "D"
                    msg = ""
    elif c == "[":
        m = patterns.RANK.match(line)
        if m:
            msg = line = line[m.end():]
            if proc is None:
                proc = ("rank", None, m.group(1), None)
        m = patterns.TORCH_CPP.match(line)
        if m:
            lvl = {"W": "W", "E": "E", "F": "C"}.get(m.group(1), "I")
            msg = line[m.end():]
    return proc, lvl, ts, fileinfo, msg


class Ranks:
    """The worker rank each process tag names, worked out once per tag (a tag also tells the engine)."""

    __slots__ = ("cache", "order")

    def __init__(self) -> None:
        self.cache: dict[Proc, int | None] = {}
        self.order: dict[Proc, int] = {}  # (name, pid, ip) -> number, for workers whose tag has no rank

    def of(self, p: ParseState, proc: Proc) -> int | None:
        r = self.cache.get(proc, _MISSING)
        if r is not _MISSING:
            return r  # type: ignore[return-value]
        name, extra, pid, ip = proc
        full = f"{name} {extra}" if extra else name
        if name.startswith(patterns.V1_PROC_PREFIXES) and name != "VllmWorkerProcess":
            p.set_engine("v1", "strong", None)
        elif name in patterns.V0_PROC_NAMES:
            p.set_engine("v0", "strong", None)
        r = None
        if name == "rank":
            r = int(pid)
        elif name.startswith(("EngineCore", "APIServer", "MainProcess", "DPCoordinator")):
            r = None
        else:
            m = patterns.RANK_EQ.search(full)
            tp, pp, dp = patterns.TP_RE.search(full), patterns.PP_RE.search(full), patterns.DP_RE.search(full)
            if m:
                r = int(m.group(1))
            elif tp and not pp and not dp:
                r = int(tp.group(1))
            elif tp and isinstance(p.info.get("tensor_parallel_size"), int):
                size = p.info["tensor_parallel_size"]
                r = (int(pp.group(1)) if pp else 0) * size + int(tp.group(1))
            elif name.startswith("VllmWorker-") or name.startswith("Worker-"):
                m = patterns.TRAILING_INT.search(name)
                r = int(m.group(1)) if m else 0
            elif name == "Worker" or (name.startswith("VllmWorker") and name != "VllmWorkerProcess"
                                      and not tp):
                r = 0
            else:  # V0 mp / Ray workers carry no rank: number them in order of appearance
                key = (name, pid, ip)
                r = self.order.setdefault(key, len(self.order) + 1)
        self.cache[proc] = r
        return r
