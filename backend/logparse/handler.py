"""The interface a figure or failure handler gets: what it may read and do on the parser.

The handlers live in figures.py, diagnose.py and environment.py (and report.py reads the finished
parse, envelope.py's Ranks sets the engine a process tag names); each takes a ``ParseState``, which
LogParser implements. They import this module, never the parser, so parser.py imports them at the
top and no module of this package imports another back."""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from backend.logparse.events import Event, Failure
from backend.logparse.marker import Launch


class ParseState(Protocol):
    # what the log said so far
    phase: str
    vllm_version: str | None
    engine: str | None
    figures: dict[str, Any]
    rank_figures: dict[str, dict[int, Any]]  # figure -> rank -> value, every worker's
    info: dict[str, Any]                     # settings read from the log: port, max_model_len, ...
    launch: Launch | None                    # the supervisor's launch marker, when the log has one
    last_progress: str                       # the last startup phase reached (kept once failed)
    was_ready: bool
    weights_done: bool
    stopping: bool
    hard_failure: Failure | None             # a diagnosis from a hard error line
    kv_fail: dict[str, Any] | None           # the KV-cache-too-small figures, once seen
    kv_token_lines: list[int]                # every "KV cache size" line (one per worker with TP>1)
    graph_bars: dict[str, int]               # CUDA-graph capture bar -> graphs captured
    frames: deque[str]                       # the last traceback frames
    recent: deque[str]                       # the last few lines

    # what a handler may do
    def to_phase(self, phase: str, t: float | None, ev: list[Event] | None) -> None: ...
    def record_figure(self, name: str, value: Any, rank: int | None, ev: list[Event] | None) -> None: ...
    def set_rank_figure(self, name: str, value: Any, rank: int | None, ev: list[Event] | None) -> None: ...
    def set_engine(self, engine: str, level: str, ev: list[Event] | None) -> None: ...
    def set_version(self, version: str, ev: list[Event]) -> None: ...

    # the finished parse (report.py)
    def snapshot(self) -> dict[str, Any]: ...
    def failure_is_permanent(self) -> bool | None: ...
    @property
    def per_rank(self) -> dict[str, dict[int, Any]]: ...
    @property
    def every_rank(self) -> dict[str, dict[int, Any]]: ...
    def phase_durations(self) -> list[tuple[str, float | None, float | None]]: ...
