"""A console's view of the supervised server: start/stop it, follow its state and log files.

The supervisor runs in its own process (`qwen-tui serve`, detached), so any number of consoles can
attach, detach and re-attach; a dropped SSH session only loses a client. Every call here is blocking
and quick; the TUI calls `poll()` from a worker thread.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any, TextIO

from backend import spawn
from backend.record import record
from backend.server import startup_history, statefile
from backend.server.status import HAS_PROCESS, IDLE, SLEEP_KEYS, SUPERVISED, ServerState, ServerStatus, in_group
from backend.spawn import Origin

if TYPE_CHECKING:
    from backend.logparse import LogParser
    from backend.server.orphans import OrphanScan, Stopped


@record(frozen=True)
class Poll:
    """One look at the server for the console: its status, the log lines since the last look, and
    what the log parser made of the whole log. A status given as a dict (tests, recordings) is read
    with ServerStatus.from_dict."""

    state: ServerStatus
    lines: list[str] = field(default_factory=list)
    new_log: bool = False  # the lines start a new log (a (re)start): clear what was shown
    parsed: dict[str, Any] = field(default_factory=dict)  # LogParser.snapshot()
    timeline: list[tuple[str, float | None, float | None]] = field(default_factory=list)  # phase, start, s
    profile: str | None = None  # the workload profile the supervised server was started with

    def __post_init__(self) -> None:
        if not isinstance(self.state, ServerStatus):
            object.__setattr__(self, "state", ServerStatus.from_dict(self.state))


def _stale(why: str | None) -> bool:
    return why is not None and why.startswith("stale state file")


def _died(last: dict[str, Any]) -> dict[str, Any]:
    """The failure a supervisor left when it died without saying so (kill -9, OOM killer)."""
    from backend.server import adopt, procs  # start-up: the console imports this module before its first frame

    left = statefile.leftovers(last)
    infos = [i for i in (procs.process_info(p) for p in left) if i is not None]
    what = ("; it left " + ", ".join(f"pid {i.pid} {i.role}" for i in infos) + " running") if infos else \
        "; nothing it started is left"
    proof = adopt.prove(last)  # its server still runs: ours beyond doubt, or not provably
    out: dict[str, Any] = {"kind": "supervisor_died",
           "message": f"the supervisor (pid {last.get('supervisor_pid')}) died while "
                      f"{last.get('state')}{what}",
           "fix": ("`qwen-tui stop --orphans` stops what it left, then start again" if infos
                   else "start the server again"),
           "left": [{"pid": i.pid, "role": i.role, "cmdline": i.cmdline} for i in infos]}
    if proof is not None:
        out.update(message=f"{proof.orphaned_text()}: the supervisor (pid {last.get('supervisor_pid')}) died "
                           f"while {last.get('state')}{what}", fix=proof.fix(), orphaned=proof.to_dict())
    return out


def status() -> ServerStatus:
    """The server as a console sees it; `.to_dict()` is the contract of `qwen-tui status --json`."""
    data, why = statefile.read_live(cleanup=False)
    if data is None:
        last = statefile.read() or {}
        died = _died(last) if in_group(last.get("state"), SUPERVISED) and _stale(why) else None
        state = ServerState.FAILED if last.get("state") == "failed" or died else ServerState.STOPPED
        failure = died or (last.get("failure") if state is ServerState.FAILED else None)
        return ServerStatus(state=state, port=last.get("port"), base_url=last.get("base_url"),
                            restarts=last.get("restarts") or 0, log_path=last.get("log_path"),
                            detail=died["message"] if died else last.get("detail"), failure=failure,
                            left=died["left"] if died else [], note=why, last_failure=last.get("last_failure"),
                            attempts=last.get("attempts") or [])
    figures = dict(data.get("figures") or {})
    started = data.get("started_at")
    st = ServerStatus(
        state=ServerState.parse(data.get("state")) or ServerState.STOPPED, supervised=True,
        pid=data.get("pid"), supervisor_pid=data.get("supervisor_pid"), port=data.get("port"),
        base_url=data.get("base_url"), uptime_s=round(time.time() - started, 1) if started else None,
        restarts=data.get("restarts") or 0, log_path=data.get("log_path"), detail=data.get("detail"),
        failure=data.get("failure"), served_models=data.get("served_models"), ready_at=data.get("ready_at"),
        served_model_name=data.get("served_model_name"), stop_report=data.get("stop_report"), figures=figures,
        expected_ready_s=startup_history.expected(data.get("argv_hash"),
                                                  statefile.state_path().parent / "startups.json"),
        sigkill_in_s=_sigkill_in(data),
        kv_cache_tokens=figures.get("kv_cache_tokens"), max_concurrency=figures.get("max_concurrency"),
        # earlier attempts' failures survive a restart: why the last one failed, while a new one runs
        attempt=data.get("attempt"), last_failure=data.get("last_failure"),
        attempts=data.get("attempts") or [], reaping_pids=data.get("reaping_pids") or [],
        workers=_workers(data), probe=data.get("probe"),
        # sleep mode (backend/server/sleep.py): state "sleeping" while the GPUs are freed
        sleep={k: data.get(k) for k in SLEEP_KEYS})
    return _with_stall(st, data, figures)


def _with_stall(st: ServerStatus, data: Mapping[str, Any], figures: Mapping[str, Any]) -> ServerStatus:
    """A starting server's "stall" (backend/server/watchdog.py), a key only while its phase is past its deadline."""
    stall = stall_of(data) if st.state is ServerState.STARTING else None
    return st.with_extra(stall=stall) if stall else st


def stall_of(data: Mapping[str, Any], now: float | None = None) -> dict[str, Any] | None:
    """The watchdog's word on a supervisor's state (its phase, since when, the settings' history)."""
    from backend.server import watchdog  # start-up: the console imports this module before its first frame

    usual = startup_history.expected_phases(data.get("argv_hash"), statefile.state_path().parent / "startups.json")
    return watchdog.check(data.get("state"), (data.get("figures") or {}).get("phase"), data.get("phase_since"),
                          usual, now)


def _workers(data: dict[str, Any]) -> list[Mapping[str, Any]]:
    """The workers alive now in the process group of a trusted live supervisor's server (none without one)."""
    pgid = data.get("pgid")
    if not isinstance(pgid, int) or isinstance(pgid, bool) or pgid <= 1 or not in_group(data.get("state"), HAS_PROCESS):
        return []
    from backend.server import procs  # start-up: only with a server process to look at

    tp = ((data.get("settings") or {}).get("server") or {}).get("tensor_parallel_size")
    return list(procs.workers(pgid, tp if isinstance(tp, int) else None))


def _sigkill_in(data: dict[str, Any]) -> float | None:
    """While stopping: seconds until the supervisor SIGKILLs what did not exit on SIGTERM."""
    at = data.get("stopping_at")
    if data.get("state") != "stopping" or not isinstance(at, (int, float)):
        return None
    timeout = float((data.get("settings") or {}).get("console", {}).get("stop_timeout", 30))
    return max(0.0, round(at + timeout - time.time(), 1))


def start_detached(origin: Origin, restart: str | None = None, timeout: float = 60.0,
                   allow_orphans: bool = False) -> dict[str, Any]:
    """Spawn `qwen-tui serve` (backend/spawn.py writes its command line) in its own session; return
    its first state. Raises RuntimeError with the supervisor's own words when it refuses (a server
    already runs, orphans hold memory, a setting this vLLM does not accept)."""
    child = spawn.supervisor(origin, restart=restart, allow_orphans=allow_orphans)
    env = child.environ()
    from backend.events import origin as event_origin  # start-up: only for a start

    tty = event_origin().get("tty")
    if tty and "QWEN_TUI_TTY" not in env:
        env["QWEN_TUI_TTY"] = tty  # the detached supervisor has no terminal: the journal says this one
    argv = child.argv
    statefile.ensure_private_dirs()
    out_path = statefile.logs_dir() / "supervisor.log"
    with open(out_path, "ab") as out:
        proc = spawn_reaped(argv, stdout=out, env=env)
    deadline = time.time() + timeout
    while time.time() < deadline:
        data = statefile.read()
        if data and data.get("supervisor_pid") == proc.pid:
            return data
        if proc.poll() is not None:
            tail = out_path.read_text(errors="replace").strip().splitlines()[-6:]
            raise RuntimeError(f"not started (code {proc.returncode}): " + "\n".join(tail))
        time.sleep(0.1)
    raise RuntimeError(f"the supervisor did not write its state within {timeout:.0f} s; see {out_path}")


def spawn_reaped(argv: list[str], stdout: Any = subprocess.DEVNULL,
                 env: dict[str, str] | None = None) -> subprocess.Popen[Any]:
    """Start `argv` in its own session and reap it the moment it exits.

    The supervisor is a child of the process that started it (the console). Unreaped, it would stay
    a zombie once it exits, and a zombie still has its pid and start time: `stop()` would take it
    for alive until its timeout (~50 s of "busy" after every stop). A daemon thread waits for it,
    so the pid disappears as soon as the supervisor ends and nothing holds the console at exit."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stdout,
                            start_new_session=True, cwd=os.getcwd(), env=env)
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    return proc


def stop(timeout: float | None = None) -> tuple[bool, str]:
    """Ask the supervisor to stop the server and wait for it; (ok, what was done). Only a trusted
    live supervisor is signalled; a dead one's leftovers are listed, not guessed at. Journalled."""
    from backend.events import record_event  # start-up: only for a stop

    t0 = time.time()
    ok, text = _stop(timeout)
    if text != "not running":
        record_event("stop", text, ok=ok, seconds=round(time.time() - t0, 1))
    return ok, text


def _stop(timeout: float | None = None) -> tuple[bool, str]:
    data, why = statefile.read_live(cleanup=False)
    if data is None:
        last = statefile.read() or {}
        if in_group(last.get("state"), SUPERVISED) and _stale(why):
            died = _died(last)
            if (died.get("orphaned") or {}).get("ok"):
                return _stop_orphaned(last)
            return not died["left"], f"{died['message']}; fix: {died['fix']}"
        return True, "not running" + (f" ({why})" if why else "")
    pid = data["supervisor_pid"]
    stop_timeout = (data.get("settings") or {}).get("console", {}).get("stop_timeout", 30)
    if isinstance(stop_timeout, bool) or not isinstance(stop_timeout, (int, float)) or not 0 <= stop_timeout < 1e5:
        stop_timeout = 30
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return True, "not running"
    except PermissionError:
        return False, f"no permission to signal the supervisor (pid {pid})"
    limit = timeout or float(stop_timeout) + 20
    deadline = time.time() + limit
    while time.time() < deadline:
        if not statefile.pid_matches(pid, data.get("supervisor_create_time")):
            return _stopped(statefile.read() or {})
        time.sleep(0.1)
    return False, f"the supervisor (pid {pid}) did not exit within {limit:.0f} s"


def _stop_orphaned(last: dict[str, Any]) -> tuple[bool, str]:
    """Stop the proved server of a dead supervisor as that supervisor would have (its group,
    SIGKILL after console.stop_timeout), and record the stop in the state file."""
    from backend.server import orphans  # start-up: the console imports this module before its first frame

    timeout = (last.get("settings") or {}).get("console", {}).get("stop_timeout", 30)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout < 1e5:
        timeout = 30
    left = statefile.leftovers(last)
    pgid = last.get("pgid") if last.get("pgid") == last.get("pid") else None
    done = orphans.stop_verified(pgid, left, float(timeout))
    report = f"stopped the server its dead supervisor left (pids {', '.join(map(str, left))}): {done.summary()}"
    statefile.write(statefile.stopped_by_console(last, report, done.release.to_dict()))
    return done.ok, report


def wait_started(timeout: float) -> str | None:
    """After a start: None once READY (or still starting at the time-out); the failure in words
    when the first attempt fails or the supervisor ends."""
    deadline = time.time() + timeout
    seen = len(status().attempts)
    while time.time() < deadline:
        st = status()
        if st.state is ServerState.READY:
            return None
        if len(st.attempts) > seen or st.state is ServerState.FAILED or \
                (in_group(st.state, IDLE) and st.supervisor_pid is None):
            f = st.failure or st.last_failure or {}
            return f"{f.get('kind') or st.state}: {f.get('message') or st.detail}"
        time.sleep(0.3)
    return None


def _stopped(final: dict[str, Any]) -> tuple[bool, str]:
    """What the supervisor's last stop did, with its "survives SIGKILL" checked again now: a process
    that took longer than the SIGKILL wait to exit (a worker freeing gigabytes) is gone, not a survivor."""
    report = final.get("stop_report") or final.get("detail") or "stopped"
    said = [s for s in final.get("stop_survivors") or [] if isinstance(s, dict) and isinstance(s.get("pid"), int)]
    if not said:
        return True, report
    deadline = time.time() + 5.0
    while True:
        left = [s["pid"] for s in said if statefile.pid_matches(s["pid"], s.get("create_time"))]
        if not left or time.time() >= deadline:
            break
        time.sleep(0.1)
    if left:
        n = len(left)
        return False, (f"{n} process{'es' if n != 1 else ''} still running after SIGKILL: "
                       f"{', '.join(map(str, left))} (see `qwen-tui stop --orphans --list`)")
    head = re.sub(r"\d+ process(?:es)? survives? SIGKILL: [\d, ]+", "", report).strip("; ")
    return True, (f"{head}; " if head else "") + (f"pids {', '.join(str(s['pid']) for s in said)} exited "
                                                  "after the SIGKILL wait")


# LogParser().snapshot(): what a poll says before any log (tests/unit/test_startup_imports.py keeps it equal)
EMPTY_SNAPSHOT: dict[str, Any] = {
    "vllm_version": None, "engine": None, "ready": False, "phase": "starting", "weights_gib": None,
    "weights_seconds": None, "kv_cache_gib": None, "kv_cache_tokens": None, "gpu_blocks": None,
    "max_concurrency": None, "max_concurrency_tokens": None, "cuda_graph_seconds": None,
    "init_engine_seconds": None, "listen_url": None, "failure": None,
}


class LogFollower:
    """Follows the current server log across restarts, feeding a parser for figures and milestones."""

    def __init__(self, max_initial_lines: int = 20000) -> None:
        self.path: str | None = None
        self._f: TextIO | None = None
        self._partial = ""
        self._parser: LogParser | None = None
        self.max_initial_lines = max_initial_lines

    @property
    def parser(self) -> LogParser:
        """The log's parser, made on first use: its imports (~15 ms) stay off the console's start."""
        if self._parser is None:
            from backend.logparse import LogParser  # start-up: the console imports this module before its first frame

            self._parser = LogParser()
        return self._parser

    @parser.setter
    def parser(self, value: LogParser | None) -> None:
        self._parser = value

    def snapshot(self) -> dict[str, Any]:
        """The parser's figures; with no log followed and none parsed, an empty parser's, without
        its imports (~40-60 ms in the poll's thread, which the console's first frame waited on)."""
        if self._parser is None and self._f is None:
            return dict(EMPTY_SNAPSHOT)
        from backend.logparse.report import breakdown  # start-up: with the parser, which is loaded late too

        snap = self.parser.snapshot()
        terms = breakdown(self.parser)  # vLLM's own memory terms per worker, for the ledger panel
        if terms:
            snap["breakdown"] = terms
        return snap

    def phase_durations(self) -> list[tuple[str, float | None, float | None]]:
        if self._parser is None and self._f is None:
            return []
        return self.parser.phase_durations()

    def close(self) -> None:
        if self._f:
            self._f.close()
            self._f = None

    def poll(self, path: str | None) -> tuple[list[str], bool]:
        new_log = False
        safe = statefile.safe_log_path(path)  # only a log under this state dir, whatever the file says
        path = str(safe) if safe else None
        if path and path != self.path:
            self.close()
            self.path, self._partial, new_log = path, "", True
            self._parser = None
            self._f = open(path, encoding="utf-8", errors="replace")
        if not self._f:
            return [], new_log
        chunk = self._f.read(4 << 20)
        if not chunk:
            return [], new_log
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        for line in lines:
            try:
                self.parser.feed(line)
            except Exception:
                pass
        return lines[-self.max_initial_lines:] if new_log else lines, new_log


class ServerClient:
    """What the console uses: state + log lines in one poll; start/stop through the supervisor."""

    def __init__(self, origin: Origin | None = None) -> None:
        self.origin = origin or Origin()  # how the supervisor it starts loads its settings
        self.follower = LogFollower()

    def poll(self) -> Poll:
        st = status()
        lines, new_log = self.follower.poll(st.log_path)
        parsed = self.follower.snapshot()
        if st.state is ServerState.STOPPED:
            # status() says "failed" when the last run failed; "stopped" is a clean stop (or none
            # yet): not what the shutdown lines of the old log look like, nor the parser's
            # initial "starting"
            parsed = dict(parsed, phase="stopped", failure=None)
        timeline = self.follower.phase_durations()
        if st.state is ServerState.STOPPED:  # nothing is under way: no open phase, no "failed" of a stop
            timeline = [t for t in timeline if t[2] is not None and t[0] != "failed"]
        return Poll(state=st, lines=lines, new_log=new_log, parsed=parsed,
                    timeline=timeline, profile=self._profile(st))

    def _profile(self, st: Mapping[str, Any]) -> str | None:
        """The running server's profile, from its supervisor's settings (read once per supervisor)."""
        key = (st.get("supervisor_pid"), st.get("attempt"))
        if key[0] is None:
            return None
        if getattr(self, "_profile_of", (None, None))[0] != key:
            settings = (statefile.read() or {}).get("settings") or {}
            self._profile_of = (key, settings.get("profile") if isinstance(settings, dict) else None)
        return self._profile_of[1]

    def start(self, allow_orphans: bool = False) -> str:
        live, _ = statefile.read_live(cleanup=False)
        if live and not in_group(live.get("state"), IDLE):
            return f"already {live.get('state')} (supervisor pid {live.get('supervisor_pid')})"
        data = start_detached(self.origin, allow_orphans=allow_orphans)
        return f"started: vLLM pid {data.get('pid')}, log {data.get('log_path')}"

    def scan_orphans(self, server_env: dict[str, Any], gpus: Any = None) -> OrphanScan:
        """Processes no supervisor owns that hold (or may hold) the GPUs: backend.server.orphans.OrphanScan."""
        from backend.server import orphans  # start-up: the console imports this module before its first frame

        return orphans.scan(server_env, monitor=gpus)

    def kill_orphans(self, pids: list[int], found: Any, gpus: Any = None) -> Stopped:
        """Kill exactly these pids of ``found`` and check their GPU memory: backend.server.orphans.Stopped."""
        from backend.server import orphans  # start-up: the console imports this module before its first frame

        return orphans.kill(pids, found, monitor=gpus)

    def sleep_wake(self, action: str, level: int = 1) -> tuple[bool, str]:
        """Ask the supervisor to sleep (level 1 or 2) or wake its server: (ok, what happened)."""
        from backend.server import sleep  # start-up: the console imports this module before its first frame

        try:
            op = sleep.request(action, level if action == "sleep" else None)
        except sleep.SleepError as e:
            return False, str(e)
        return bool(op.get("ok")), op.get("message") or ""

    def stop_supervisor(self, info: Any) -> str:
        """SIGTERM another live supervisor of this user (backend.server.owners.SupervisorInfo) and wait."""
        from backend.server import owners  # start-up: the console imports this module before its first frame

        return owners.stop_supervisor(info)

    def stop(self) -> str:
        ok, msg = stop()
        return msg if ok else f"stop failed: {msg}"

    def restart(self) -> str:
        ok, text = self.restart_keeping()
        return text

    def restart_keeping(self, allow_orphans: bool = False, wait_s: float = 900.0) -> tuple[bool, str]:
        """Stop, start the new settings, and wait for READY; when the new server is refused or its
        first attempt fails, start the old one again (its recorded server settings as --set) and
        say why. (ok, what happened)."""
        old = statefile.read() or {}
        stopped = self.stop()
        try:
            self.start(allow_orphans)
            failure = wait_started(wait_s)
        except RuntimeError as e:
            failure = f"refused: {e}"
        from backend.events import record_event  # start-up: only for a restart

        new = ((statefile.read() or {}).get("settings") or {}).get("server") or {}
        was = (old.get("settings") or {}).get("server") or {}
        diff = {f"server.{k}": [was.get(k), new.get(k)] for k in sorted(set(was) | set(new))
                if was.get(k) != new.get(k) and k != "api_key"}
        if failure is None:
            record_event("restart", f"restarted: {status().state}", diff=diff)
            return True, f"{stopped}; restarted: {status().state}"
        record_event("restart", f"failed ({failure}): the old settings started again", diff=diff)
        if in_group(status().state, SUPERVISED):
            stop()  # what is left of the new one (a backoff would try again)
        return False, f"{stopped}; the new settings did not start ({failure}); {self.restore(old)}"

    def restore(self, old: Mapping[str, Any]) -> str:
        """Start the server again with the settings it ran with (the state file's snapshot)."""
        server = ((old.get("settings") or {}).get("server") or {}) if old.get("argv") else {}
        if not server:
            return "the old server was not running: nothing to restore"
        try:
            data = start_detached(spawn.restoring(self.origin, server), allow_orphans=True)
        except RuntimeError as e:
            return f"the old settings could not be started either: {e}"
        return f"the old server is back (supervisor pid {data.get('supervisor_pid')}, {data.get('base_url')})"

    def close(self) -> None:
        self.follower.close()
