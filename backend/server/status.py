"""The server's state, once: the states, their groups, and the status record every reader shares.

The supervisor writes its state file (backend/server/statefile.py); `supervisor_client.status()` reads it
into a `ServerStatus`; `qwen-tui status --json` prints `ServerStatus.to_dict()`, whose keys, order
and values are a contract (tests/unit/test_status_contract.py). Everything between uses the typed
fields and the groups below, never its own list of state names.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import field
from functools import cached_property
from typing import Any

from backend.record import fields, record, replace


class ServerState(enum.StrEnum):
    """What the supervisor says its server is doing (the state file's "state")."""

    STOPPED = "stopped"    # nothing runs; a clean stop, or never started
    STARTING = "starting"  # vLLM launched, not answering yet
    READY = "ready"        # answers /health and serves the model
    FAILED = "failed"      # ended with a diagnosis (`failure`); not restarted
    STOPPING = "stopping"  # SIGTERM sent to its process group, waiting (SIGKILL after console.stop_timeout)
    BACKOFF = "backoff"    # an attempt failed; the supervisor restarts it after a delay (console.restart)
    SLEEPING = "sleeping"  # vLLM's sleep mode: alive, GPU memory freed, wakes on request

    @classmethod
    def parse(cls, value: object) -> ServerState | None:
        """The state for a state-file value; None for anything else (an unknown or missing state)."""
        if not isinstance(value, str):
            return None
        try:
            return cls(value)
        except ValueError:
            return None


S = ServerState
STATES: tuple[ServerState, ...] = tuple(ServerState)

# A supervisor process owns a server: it has to be stopped, its file must name a live supervisor.
SUPERVISED: frozenset[ServerState] = frozenset({S.STARTING, S.READY, S.STOPPING, S.BACKOFF, S.SLEEPING})
# The server runs or will run again (SUPERVISED less a stop under way): quitting asks keep/stop,
# a saved server setting needs a restart, the plan on screen may be ahead of the server.
RUNNING: frozenset[ServerState] = SUPERVISED - {S.STOPPING}
# Our vLLM process exists (between two attempts there is none): it holds its port and GPU memory.
HAS_PROCESS: frozenset[ServerState] = SUPERVISED - {S.BACKOFF}
# The process answers HTTP (awake or asleep): its port is held, sleep/wake can be asked.
SERVING: frozenset[ServerState] = frozenset({S.READY, S.SLEEPING})
# The status carries this attempt's diagnosis (`failure`).
FAILING: frozenset[ServerState] = frozenset({S.FAILED, S.BACKOFF})
# Nothing to fix: `qwen-tui status` exits 0.
HEALTHY: frozenset[ServerState] = frozenset({S.READY, S.STARTING, S.STOPPED, S.SLEEPING})
# A start may begin (nothing owns the server).
IDLE: frozenset[ServerState] = frozenset({S.STOPPED, S.FAILED})

SLEEP_KEYS = ("sleep_enabled", "sleep_level", "slept_at", "gpu_memory_freed_bytes", "wake_seconds", "sleep_op")


def in_group(state: object, group: frozenset[ServerState]) -> bool:
    """Whether a state (a ServerState, its string, or anything read from a file) is in `group`."""
    parsed = ServerState.parse(state)
    return parsed is not None and parsed in group


@record(frozen=True)
class ServerStatus(Mapping[str, Any]):
    """One look at the server, as `qwen-tui status --json` reports it.

    `supervised`: a live supervisor answered (the state file is trusted and its pid alive); the two
    cases print different key sets (`left`/`note` only without one; the live figures only with one).
    Reading it as a mapping (`status["state"]`, `.get("detail")`) reads the JSON contract's keys,
    for the edges that print or compare JSON; code in between uses the fields."""

    state: ServerState
    supervised: bool = False
    pid: int | None = None
    supervisor_pid: int | None = None
    port: int | None = None
    base_url: str | None = None
    uptime_s: float | None = None
    restarts: int = 0
    log_path: str | None = None
    detail: str | None = None
    failure: Mapping[str, Any] | None = None
    # with a supervisor
    served_models: list[str] | None = None
    ready_at: float | None = None
    served_model_name: str | None = None
    stop_report: str | None = None
    figures: Mapping[str, Any] = field(default_factory=dict)  # the log parser's figures, as the supervisor saw them
    expected_ready_s: float | None = None
    sigkill_in_s: float | None = None
    attempt: int | None = None
    reaping_pids: list[int] = field(default_factory=list)
    # the server's VLLM::Worker* processes, seen alive in its process group: {pid, rank, title, rss_bytes}
    workers: list[Mapping[str, Any]] = field(default_factory=list)
    # the supervisor's 2-token readiness completion: {ok, seconds, requests, prompt_tokens, completion_tokens}
    probe: Mapping[str, Any] | None = None
    # without one
    left: list[Mapping[str, Any]] = field(default_factory=list)
    note: str | None = None
    # both
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    last_failure: Mapping[str, Any] | None = None
    attempts: list[Mapping[str, Any]] = field(default_factory=list)
    sleep: Mapping[str, Any] = field(default_factory=dict)  # SLEEP_KEYS -> value
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys added at an edge (status --json's "metrics")

    # -- groups ---------------------------------------------------------------------------------
    @property
    def is_supervised(self) -> bool:
        return self.state in SUPERVISED

    @property
    def is_running(self) -> bool:
        return self.state in RUNNING

    @property
    def is_serving(self) -> bool:
        return self.state in SERVING

    # -- the JSON contract ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """`status --json`: the keys in the order they have always had."""
        return dict(self._dict)

    @cached_property
    def _dict(self) -> dict[str, Any]:
        head: dict[str, Any] = {
            "state": str(self.state), "pid": self.pid, "supervisor_pid": self.supervisor_pid, "port": self.port,
            "base_url": self.base_url, "uptime_s": self.uptime_s, "restarts": self.restarts,
            "log_path": self.log_path, "detail": self.detail, "failure": self.failure}
        if not self.supervised:
            return {**head, "left": self.left, "kv_cache_tokens": self.kv_cache_tokens,
                    "max_concurrency": self.max_concurrency, "note": self.note,
                    "last_failure": self.last_failure, "attempts": self.attempts,
                    **{k: self.sleep.get(k) for k in SLEEP_KEYS}, **self.extra}
        return {**head, "served_models": self.served_models, "ready_at": self.ready_at,
                "served_model_name": self.served_model_name, "stop_report": self.stop_report, **self.figures,
                "expected_ready_s": self.expected_ready_s, "sigkill_in_s": self.sigkill_in_s,
                "kv_cache_tokens": self.kv_cache_tokens, "max_concurrency": self.max_concurrency,
                "attempt": self.attempt, "last_failure": self.last_failure, "attempts": self.attempts,
                "reaping_pids": self.reaping_pids, **{k: self.sleep.get(k) for k in SLEEP_KEYS},
                "workers": self.workers, "probe": self.probe, **self.extra}

    def __getitem__(self, key: str) -> Any:
        return self._dict[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._dict)

    def with_extra(self, **extra: Any) -> ServerStatus:
        """The same status with keys an edge adds (status --json's live "metrics")."""
        return replace(self, extra={**self.extra, **extra})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerStatus:
        """From a status dict (`to_dict()`'s keys; tests and recorded states). Unknown states read
        as stopped; keys that are no field are kept in `extra`, after the rest."""
        if isinstance(data, ServerStatus):
            return data
        own = {f.name for f in fields(cls)} - {"state", "supervised", "figures", "sleep", "extra", "left", "note"}
        known = own | {"state", "left", "note", *SLEEP_KEYS}
        supervised = data.get("supervisor_pid") is not None or "served_models" in data
        kw = {k: data[k] for k in own if k in data and data[k] is not None}
        return cls(state=ServerState.parse(data.get("state")) or ServerState.STOPPED, supervised=supervised,
                   left=list(data.get("left") or []), note=data.get("note"),
                   sleep={k: data.get(k) for k in SLEEP_KEYS},
                   extra={k: v for k, v in data.items() if k not in known}, **kw)
