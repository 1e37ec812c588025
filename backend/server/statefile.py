"""The supervisor's state file: what a console needs to find and trust a running server.

Written atomically (temp file + rename, mode 0600) by the supervisor process only. Readers trust
nothing in it on its word: `read_checked()` refuses a file that another user owns, that others may
write, or whose fields have the wrong types; `read_live()` then requires the supervisor pid to be
alive, started at the recorded time, and to be a qwen-tui supervisor by its command line. Anything
else is "untrusted state file: why" (never signalled) or a stale file that is set aside.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, cast, get_args, get_origin, get_type_hints

from backend import paths
from backend.record import fields, record
from backend.server.status import STATES, SUPERVISED


@record
class ServerRecord:
    """The state file's one record: every key it holds, typed. The supervisor writes one at every
    transition (`Supervisor.record()`), the console one for an orphan it stopped (`stopped_by_console`);
    `FIELDS`, the types a reader checks, is derived from it. None: unknown, or not this state's."""

    state: str | None = None
    detail: str | None = None
    supervisor_pid: int | None = None
    supervisor_create_time: float | None = None
    supervisor_cmdline: str | None = None
    pid: int | None = None
    pid_create_time: float | None = None
    pgid: int | None = None
    reaping_pids: list[int] | None = None
    host: str | None = None
    port: int | None = None
    base_url: str | None = None
    served_model_name: str | None = None
    served_models: list[str] | None = None
    started_at: float | None = None
    ready_at: float | None = None
    updated_at: float | None = None  # stamped by write()
    phase_since: float | None = None  # when this phase began (the hang watchdog, backend/server/watchdog.py)
    restarts: int | None = None
    log_path: str | None = None
    argv: list[str] | None = None
    argv_hash: str | None = None
    env: dict[str, str] | None = None
    settings: dict[str, Any] | None = None
    failure: dict[str, Any] | None = None
    stop_report: str | None = None
    gpu_release: dict[str, Any] | None = None
    stop_survivors: list[Any] | None = None
    probe: dict[str, Any] | None = None
    figures: dict[str, Any] | None = None
    state_dir: str | None = None
    # failure memory across restarts, the stop countdown, sleep mode
    attempt: int | None = None
    attempts: list[Any] | None = None
    last_failure: dict[str, Any] | None = None
    stopping_at: float | None = None
    sleep_enabled: bool | None = None
    sleep_level: int | None = None
    slept_at: float | None = None
    gpu_memory_freed_bytes: int | None = None
    wake_seconds: float | None = None
    sleep_op: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def argv_hash(argv: list[str]) -> str:
    """The record's argv_hash: which launch argv (so which settings) a server runs."""
    import hashlib  # start-up: the supervisor's only (OpenSSL's load was ~1 ms of the console's start)

    return hashlib.sha256("\0".join(argv).encode()).hexdigest()[:16]


def _types(hint: Any) -> tuple[type, ...]:
    """The JSON types a field's annotation allows (None aside): a time is an int or a float."""
    out: list[type] = []
    for arg in get_args(hint) or (hint,):
        base = get_origin(arg) or arg
        if base is type(None):
            continue
        out += [int, float] if base is float else [base]
    return tuple(out)


@cache
def _fields() -> dict[str, tuple[type, ...]]:
    """`FIELDS`: field -> the types it may have (None always allowed except where REQUIRED says so).
    Read from the record's annotations on first use: evaluating them was ~0.5 ms of the console's
    start, which reads no state file when no server runs."""
    return {name: _types(hint) for name, hint in get_type_hints(ServerRecord).items()}


def __getattr__(name: str) -> Any:
    if name == "FIELDS":
        return _fields()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


PID_FIELDS = ("supervisor_pid", "pid", "pgid")
# --watch on another user's state dir: its files are read (never trusted to signal: watch mode has
# no key that signals), so another owner is no reason to refuse them
READ_ONLY = {"others": False}
REQUIRED_WHEN_SUPERVISED = ("supervisor_pid", "supervisor_create_time")


def state_path() -> Path:
    return paths.state_dir() / "server.json"


def logs_dir() -> Path:
    return paths.state_dir() / "logs"


def ensure_private_dirs() -> None:
    """The state dir and its logs/ exist and are user-only (0700): logs may hold prompts."""
    for d in (paths.state_dir(), logs_dir()):
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            if d.stat().st_uid == os.geteuid() and d.stat().st_mode & 0o077:
                d.chmod(0o700)
        except OSError:
            pass


def write(record: ServerRecord | Mapping[str, Any], path: Path | None = None) -> None:
    """The server's record as its state file, stamped `updated_at`. A mapping (a record read back and
    changed, a test's) is written with its own keys, each one a record field (else ValueError): a key
    it lacks stays absent, as an older supervisor's file has it."""
    if isinstance(record, ServerRecord):
        data = record.to_dict()
    else:
        unknown = sorted(set(record) - set(_fields()))
        if unknown:
            raise ValueError(f"not state-file keys: {', '.join(unknown)}")
        data = dict(record)
    path = path or state_path()
    if path == state_path():
        ensure_private_dirs()
    write_json(dict(data, updated_at=time.time()), path)


def stopped_by_console(last: Mapping[str, Any], report: str, release: dict[str, Any]) -> dict[str, Any]:
    """A dead supervisor's record once the console stopped the server it left."""
    return dict(last, state="stopped", detail=report, stop_report=report, pid=None, pgid=None, gpu_release=release)


def write_json(data: Mapping[str, Any], path: Path) -> None:
    """`data` as the JSON file `path`, atomically (temp file + rename), 0600; a reader never sees half
    of it (the server's state file, the pull's)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        json.dump(data, f, indent=1, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def file_problem(path: Path) -> str | None:
    """Why a file is not ours to trust (another owner, writable by others, not a plain file)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot stat: {e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "not a plain file"
    if st.st_uid != os.geteuid() and not READ_ONLY["others"]:
        return f"owned by uid {st.st_uid}, not by you (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def type_problem(data: Any) -> str | None:
    """Why the fields of a state file cannot be used, or None."""
    if not isinstance(data, dict):
        return f"not a JSON object but {type(data).__name__}"
    for key, types in _fields().items():
        value = data.get(key)
        if value is None:
            continue
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            return f"{key} is {type(value).__name__} {str(value)[:40]!r}"
        if isinstance(value, float) and value != value:
            return f"{key} is NaN"
    if data.get("state") is not None and data["state"] not in STATES:
        return f"state {data['state']!r} is not one of {', '.join(STATES)}"
    for key in PID_FIELDS:
        if data.get(key) is not None and data[key] <= 1:
            return f"{key} {data[key]} is not a pid a server can have"
    if data.get("state") in SUPERVISED:
        for key in REQUIRED_WHEN_SUPERVISED:
            if data.get(key) is None:
                return f"state {data['state']} without {key}"
    for key in ("supervisor_create_time", "pid_create_time", "started_at", "ready_at"):
        if data.get(key) is not None and not 0 <= data[key] < 1e11:
            return f"{key} {data[key]} is not a time"
    for pid in data.get("reaping_pids") or []:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
            return f"reaping_pids holds {pid!r}"
    if data.get("restarts") is not None and data["restarts"] < 0:
        return f"restarts {data['restarts']} is negative"
    return None


def read_checked(path: Path | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """(data, None), (None, None) when there is no file, or (None, why) when it is not trusted."""
    path = path or state_path()
    if not os.path.lexists(path):
        return None, None
    problem = file_problem(path)
    if problem:
        return None, problem
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:
        return None, f"cannot read: {e.strerror}"
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        return None, f"not JSON: {str(e)[:80]}"
    problem = type_problem(data)
    return (None, problem) if problem else (data, None)


def read(path: Path | None = None) -> dict[str, Any] | None:
    """The file's contents when it can be trusted as a record (owner, mode, types); else None."""
    return read_checked(path)[0]


def create_time(pid: int) -> float | None:
    import psutil  # start-up: loaded on first use (a pid to check), not before the first frame

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, ValueError, TypeError):
        return None


def cmdline(pid: int) -> str | None:
    import psutil  # start-up: loaded on first use (a pid to check), not before the first frame

    try:
        return " ".join(psutil.Process(pid).cmdline())
    except (psutil.Error, ValueError, TypeError):
        return None


def is_supervisor_argv(argv: list[str]) -> bool:
    """A `qwen-tui ... serve` (console script or `python -m backend.cli`) command line."""
    from backend.spawn import is_cli_argv  # the shape of a qwen-tui command line is written there

    rest = is_cli_argv(argv)
    return rest is not None and "serve" in rest and "--detach" not in rest  # --detach only launches one


def is_supervisor(pid: int) -> bool:
    import psutil  # start-up: loaded on first use (a pid to check), not before the first frame

    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and is_supervisor_argv(p.cmdline())
    except (psutil.Error, ValueError, TypeError):
        return False


def pid_matches(pid: Any, created: Any) -> bool:
    """True only if `pid` runs now (not a zombie) and started at `created` (a reused pid starts later)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
        return False
    if isinstance(created, bool) or not isinstance(created, (int, float)):
        return False
    import psutil  # start-up: loaded on first use (a pid to check), not before the first frame

    try:
        proc = psutil.Process(pid)
        actual = proc.create_time()
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False  # exited; its parent has not reaped it (a parent that died leaves it to init)
    except (psutil.Error, ValueError, TypeError):
        return False
    return bool(abs(actual - created) < 0.05)


def _set_aside(path: Path, suffix: str) -> None:
    try:
        os.replace(path, path.with_suffix(suffix))
    except OSError:
        pass


def read_live(path: Path | None = None, cleanup: bool = True) -> tuple[dict[str, Any] | None, str | None]:
    """The state of a live supervisor, or (None, why) when there is none or the file is stale or
    untrusted. A stale file is renamed to `server.json.stale`, an untrusted one (when it is ours to
    move) to `server.json.untrusted`: kept for the record, never trusted, never signalled."""
    path = path or state_path()
    data, problem = read_checked(path)
    if problem:
        if cleanup:
            _set_aside(path, ".json.untrusted")
        return None, f"untrusted state file {path}: {problem}"
    if data is None:
        return None, None
    pid = cast(int, data.get("supervisor_pid"))  # read_checked: an int unless the state is final (then unused)
    recorded = data.get("supervisor_cmdline")  # same pid and start time but another program: exec()
    alive = pid_matches(pid, data.get("supervisor_create_time"))
    if alive and is_supervisor(pid) and (recorded is None or cmdline(pid) == recorded):
        return data, None
    if data.get("state") in ("stopped", "failed", None):
        return None, None  # the supervisor finished and said so: history, not a stale file
    if alive and not is_supervisor(pid):
        why = (f"untrusted state file {path}: pid {pid} ({(cmdline(pid) or '?')[:60]}) "
               "is not a qwen-tui supervisor")
    elif alive:
        why = f"stale state file: pid {pid} now belongs to another process (another command line)"
    elif create_time(pid) is None:
        why = f"stale state file: supervisor pid {pid} is gone"
    else:
        why = f"stale state file: pid {pid} now belongs to another process"
    if cleanup:
        _set_aside(path, ".json.stale")
    return None, why


def leftovers(data: dict[str, Any] | None) -> list[int]:
    """Processes a dead supervisor's (type-checked) file names that still run: its API server
    (same start time) and that server's process group."""
    if not data:
        return []
    from backend.server import procs  # procs only for a dead supervisor's leftovers: statefile loads at start-up

    left: set[int] = set()
    pid, pgid = data.get("pid"), data.get("pgid")
    if pid and pid_matches(pid, data.get("pid_create_time")):
        left.add(pid)
    if pgid and pgid == pid and pgid != os.getpgrp():
        left.update(procs.group_members(pgid))
    return sorted(p for p in left if p > 1 and p != os.getpid())


def safe_log_path(value: Any) -> Path | None:
    """The log named by a state file, only when it lies under this state dir's logs/ (resolved,
    so `..` and symlinks cannot lead out) and is a plain file; else None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        resolved = Path(value).resolve()
        root = logs_dir().resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if root not in resolved.parents or not resolved.is_file():
        return None
    return resolved
