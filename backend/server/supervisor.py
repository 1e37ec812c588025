"""The supervisor: launches `vllm serve`, follows its log, knows when it is ready, stops it cleanly.

It runs in the `qwen-tui serve` process (foreground, or detached with --detach / from the console),
never in the TUI, so a dropped SSH session does not take the server down. Consoles are clients: they
read the state file and follow the log file that the supervisor writes.

States: starting -> ready (only when /health answers 200: backend/server/health.py) -> stopping -> stopped,
or failed (with the parsed cause), then backoff -> starting when the restart policy allows.
ready <-> sleeping: vLLM's sleep mode, asked for through a request file and SIGUSR1 (backend/server/sleep.py).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from backend.logparse import Failure, LogParser, is_permanent, launch_marker
from backend.logparse.report import rank_table
from backend.server import health, sleep, statefile
from backend.server.launch import Launch
from backend.server.status import FAILING
from backend.settings import Settings

# Which failure kinds are never restarted (they would fail the same way: a setting, a file or the
# machine causes them) is the log parser's: backend.logparse.is_permanent, per kind in
# backend/logparse/events.py RESTART. Beside it, a kind that repeats before READY is not restarted
# either (_record_attempt): a transient kind (a port still closing) gets one more try, not a loop.
ATTEMPTS_KEPT = 20  # failed attempts remembered in the state file (kind, message, fix, log path)
STARTING_STOP_TIMEOUT_S = 5.0  # a server still loading has no requests to drain: SIGKILL sooner
BACKOFF_START_S = 5.0
BACKOFF_CAP_S = 300.0
LOG_POLL_S = 0.05  # how often the log vLLM writes is read for new lines
TAIL_LINES = 8


KILLED_FIX = ("something outside qwen-tui sent it the signal: the kernel's OOM killer (see `dmesg`) or a user; "
              "it is restarted if console.restart allows")


def exit_text(rc: int) -> str:
    """How a process ended, in words: "exited with code 1", "killed by signal 9 (SIGKILL)"."""
    if rc < 0:
        import signal  # the name of a signal: only after a kill

        try:
            name = f" ({signal.Signals(-rc).name})"
        except ValueError:
            name = ""
        return f"killed by signal {-rc}{name}"
    return f"exited with code {rc}"


@dataclass(frozen=True)
class Transition:
    state: str
    detail: str
    at: float


def backoff_delay(failures: int) -> float:
    """5 s, 10 s, 20 s ... capped at 5 min (failures counts the one that just happened)."""
    return float(min(BACKOFF_START_S * 2 ** max(failures - 1, 0), BACKOFF_CAP_S))


def same_cause(a: str | None, b: str | None) -> bool:
    """Two root-cause lines say the same thing: equal but for their numbers (pids, ports, free memory)."""
    def norm(text: str | None) -> str:
        return re.sub(r"\d+(?:\.\d+)?", "N", (text or "").strip())

    return bool(norm(a)) and norm(a) == norm(b)


class Supervisor:
    """One supervised server. Create it in the process that owns the server, then `await run()`."""

    def __init__(self, settings: Settings, launch: Launch, *, on_line: Callable[[str], None] | None = None,
                 on_state: Callable[[Transition], None] | None = None, state_path: Path | None = None,
                 logs_dir: Path | None = None, restart: str | None = None, gpus: Any = None,
                 adopt: dict[str, Any] | None = None) -> None:
        self.settings = settings
        self.launch = launch
        self.on_line = on_line
        self.on_state = on_state
        self.state_path = state_path or statefile.state_path()
        self.logs_dir = logs_dir or statefile.logs_dir()
        self.restart_policy = restart or settings.console_cfg.restart
        self.state = "stopped"
        self.detail = ""
        self.proc: asyncio.subprocess.Process | None = None
        self.parser = LogParser()
        self.log_path: Path | None = None
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.restarts = 0
        self.failures: deque[float] = deque()
        self.failure: dict[str, Any] | None = None
        self.stop_report: str | None = None
        # pids (with start times) the last stop left alive after SIGKILL: `qwen-tui stop` looks again
        self.stop_survivors: list[dict[str, Any]] = []
        self.stopping_at: float | None = None  # when SIGTERM went out: consoles count down to SIGKILL
        self.served_models: list[str] = []
        # one record per failed attempt (newest last): survives the restarts, so status, serve --wait
        # and the console can still show why the last attempt failed while a new one starts
        self.attempts: list[dict[str, Any]] = []
        # pids of a dead launch being cleaned up: still ours, never orphans (backend.server.orphans)
        self.reaping_pids: list[int] = []
        self._stop_requested = asyncio.Event()
        # set when this launch has failed while its process still runs (an engine-death line, or
        # /health failing past the grace period): _run_once stops it. Reset for each launch.
        self._launch_failed = asyncio.Event()
        self._health_fail_since: float | None = None
        self._pgid: int | None = None
        self._output_done = asyncio.Event()  # the launch is over: read the log to its end and stop
        # a backend.gpu.GpuMonitor, to verify that a stop released the GPU memory; opened in run()
        # when not given (it never raises: no NVML just means the check is skipped and said so)
        self.gpus = gpus
        self.gpu_release: dict[str, Any] | None = None
        self._cmdline = statefile.cmdline(os.getpid())  # re-attach checks it with the start time
        self.sleep = sleep.SleepControl(bool(settings.server_cfg.enable_sleep_mode))
        self.recorder: Any = None  # backend.recorder.Recorder, its own thread: made in run()
        # a dead supervisor's state whose server backend.server.adopt proved ours: the first launch is
        # that server, watched, not a new one (its argv shown until a restart launches ours)
        self.adopt = adopt
        self.adopted_argv: list[str] | None = None
        self._log_offset = 0  # where the reader starts in the log (an adopted log: its end)
        self._journalled: set[tuple[str, int, int]] = set()
        self._phase_since: float | None = None  # when the parser's phase last changed (time.time())
        self.probe: dict[str, Any] | None = None  # the last readiness probe (see _probe)
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)  # the log's last lines, for a failure's context

    # -- state ---------------------------------------------------------------------------------
    def _set(self, state: str, detail: str = "") -> None:
        was = self.state
        self.state, self.detail = state, detail
        self._write_state()
        if self.recorder is not None:  # a queue put: never blocks the loop
            # a process that ended unasked is "stopping" while it is cleaned up: the history calls it died
            died = state == "stopping" and not self._stop_requested.is_set()
            self.recorder.event("restart" if state == "starting" and self.restarts else "died" if died else state,
                                detail)
        key = (state, self.restarts, id(self.proc))
        if key not in self._journalled and "cleaning up" not in detail:  # once per state and attempt
            self._journalled.add(key)
            self._journal(state, detail, was)
        if self.on_state:
            self.on_state(Transition(state, detail, time.time()))

    def _journal(self, state: str, detail: str, was: str) -> None:
        """The outcomes worth a line in the journal (backend/events.py): READY in N s, failed with
        its kind, stopped in N s and the memory released; the launch itself and an adoption."""
        from backend.events import record_event  # start-up: the console imports supervisor's deps lazily

        where = self.state_path.parent
        pid = self.proc.pid if self.proc else None
        if state == "starting" and detail.startswith("adopted"):
            record_event("adopt", detail, where, server_pid=pid, port=self.settings.server_cfg.port)
        elif state == "starting":
            record_event("start", f"launched pid {pid}", where, server_pid=pid, attempt=self.restarts + 1,
                         port=self.settings.server_cfg.port, profile=self.settings.profile)
        elif state == "ready" and was == "starting":
            took = (self.ready_at or 0) - (self.started_at or self.ready_at or 0)
            record_event("ready", f"READY in {took:.0f} s" if self.adopted_argv is None else "READY (adopted)",
                         where, server_pid=pid, seconds=round(took, 1))
        elif state == "failed":
            record_event("failed", f"failed: {self.failure.get('kind') if self.failure else '?'}", where,
                         kind=(self.failure or {}).get("kind"), detail=detail)
        elif state == "stopped":
            record_event("stopped", detail, where, gpu_release=(self.gpu_release or {}).get("summary"))

    def status(self) -> dict[str, Any]:
        return self.record().to_dict()

    def record(self) -> statefile.ServerRecord:
        """What the state file says now (backend/server/statefile.py's one record)."""
        snap = self.parser.snapshot()
        pid = self.proc.pid if self.proc and self.proc.returncode is None else None
        return statefile.ServerRecord(
            state=self.state,
            detail=self.detail,
            pid=pid,
            pid_create_time=statefile.create_time(pid) if pid else None,
            pgid=self._pgid if pid or self.reaping_pids else None,
            reaping_pids=self.reaping_pids,
            supervisor_pid=os.getpid(),
            supervisor_create_time=statefile.create_time(os.getpid()),
            supervisor_cmdline=self._cmdline,
            host=self.settings.server_cfg.host,
            port=self.settings.server_cfg.port,
            base_url=self.settings.base_url,
            served_model_name=self.settings.served_name,
            served_models=self.served_models,
            started_at=self.started_at,
            ready_at=self.ready_at,
            restarts=self.restarts,
            log_path=str(self.log_path) if self.log_path else None,
            argv=self.adopted_argv or self.launch.argv,
            argv_hash=statefile.argv_hash(self.adopted_argv or self.launch.argv),
            env=self.launch.env,
            settings=self.settings.snapshot(),
            # what the supervisor itself saw (/health failing) first; else the log's diagnosis
            failure=self.failure or (snap.get("failure") if self.state in FAILING else None),
            attempt=self.restarts + 1,
            attempts=self.attempts[-ATTEMPTS_KEPT:],
            last_failure=self.attempts[-1] if self.attempts else None,
            stop_report=self.stop_report,
            stop_survivors=self.stop_survivors,
            probe=self.probe,
            stopping_at=self.stopping_at,
            gpu_release=self.gpu_release,
            figures={**{k: snap.get(k) for k in ("vllm_version", "kv_cache_tokens", "kv_cache_gib",
                                                 "max_concurrency", "max_concurrency_tokens",
                                                 "weights_gib", "weights_seconds", "phase")},
                     # each worker's figures at TP>1 (both ranks' KV lines): figure -> rank -> value
                     "per_rank": rank_table(self.parser) or None},
            # when this phase began, on this clock (the hang watchdog, backend/server/watchdog.py)
            phase_since=self._phase_since or self.started_at,
            **self.sleep.fields(self.state),
        )

    def _write_state(self) -> None:
        statefile.write(self.record(), self.state_path)

    # -- one launch ----------------------------------------------------------------------------
    async def _spawn(self) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log_path = self.logs_dir / f"vllm-{stamp}-{os.getpid()}-{self.restarts}.log"
        self.parser = LogParser()
        self.failure = None
        self.ready_at = None
        self.stop_report, self.stop_survivors = None, []  # each launch's stop says what it did itself
        self.probe = None
        self._tail.clear()
        self._health_fail_since = None
        self.started_at = time.time()
        self._phase_since = None
        self._launch_failed = asyncio.Event()
        self.sleep.reset()
        # vLLM writes its log itself (a file, not a pipe to us): if this supervisor dies, the log
        # keeps appending and a new supervisor can adopt the server (backend/server/adopt.py). A shell
        # writes the launch marker with its own pid ($$), then execs vLLM under that same pid, so
        # the marker is the log's first line whatever vLLM prints first.
        head, _, rest = launch_marker(self.started_at, None, self.launch.argv).partition(" argv: ")
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                "/bin/sh", "-c", 'printf "%s pid %s argv: %s" "$1" "$$" "$2"; shift 2; exec "$@"', "sh",
                head, rest, *self.launch.argv, env=self.launch.full_env(), stdin=asyncio.subprocess.DEVNULL,
                stdout=fd, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        finally:
            os.close(fd)
        self._pgid = self.proc.pid  # a new session: its leader's pid is the group id
        # the reader starts after the marker, as it did when the marker was ours and vLLM's a pipe
        self._log_offset = len(f"{head} pid {self.proc.pid} argv: {rest}".encode())
        self._output_done = asyncio.Event()
        self._set("starting", f"pid {self.proc.pid}")

    async def _attach(self) -> None:
        """Adopt the proved server of a dead supervisor: watch its pid, follow its log from the
        end (its earlier lines only fed to the parser, for the figures), stop it as our own."""
        from backend.server.adopt import Adopted  # only when adopting: the supervisor starts quickly

        data, self.adopt = self.adopt or {}, None
        pid = int(data["pid"])
        self.proc = Adopted(pid, float(data["pid_create_time"]))  # type: ignore[assignment]
        self._pgid = int(data.get("pgid") or data["pid"])
        self.log_path = Path(data["log_path"])
        self.adopted_argv = list(data.get("argv") or []) or None
        self.parser = LogParser()
        self.failure, self.ready_at, self._health_fail_since = None, None, None
        self.started_at = data.get("started_at")
        self.restarts = int(data.get("restarts") or 0)
        self.attempts = list(data.get("attempts") or [])
        self._launch_failed = asyncio.Event()
        self._output_done = asyncio.Event()
        self.sleep.reset()
        self._log_offset = await asyncio.to_thread(self._feed_old_log)
        note = (f"qwen-tui: supervisor pid {os.getpid()} adopted pid {pid} at "
                f"{time.strftime('%Y-%m-%d %H:%M:%S')} (its supervisor pid {data.get('supervisor_pid')} died)\n")
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(note)
        self._set("starting", f"adopted pid {pid} (its supervisor pid {data.get('supervisor_pid')} died)")

    def _feed_old_log(self) -> int:
        assert self.log_path is not None
        with open(self.log_path, "rb") as f:
            data = f.read()
        for raw in data.split(b"\n"):
            try:
                self.parser.feed(raw.decode("utf-8", errors="replace"))
            except Exception:  # a parser bug must never take the server down
                pass
        return len(data)

    async def _read_output(self, log: BinaryIO) -> None:
        """Follow the log vLLM writes, line by line, until _output_done is set (the launch is over
        and what it left is reaped), then read what is left and return."""
        partial = b""
        while True:
            done = self._output_done.is_set()
            chunk = log.read(1 << 20)
            if chunk:
                lines = (partial + chunk).split(b"\n")
                partial = lines.pop()
                if len(partial) >= 1 << 20:  # a line longer than that: take what is there
                    lines.append(partial)
                    partial = b""
                for raw in lines:
                    self._on_line(raw.decode("utf-8", errors="replace"))
                continue
            if done:
                if partial:
                    self._on_line(partial.decode("utf-8", errors="replace"))
                return
            await asyncio.sleep(LOG_POLL_S)

    def _on_line(self, line: str) -> None:
        phase = self.parser.phase
        try:
            events = self.parser.feed(line, time.time())
        except Exception:  # a parser bug must never take the server down
            events = []
        if self.parser.phase != phase:
            self._phase_since = time.time()
        if self.on_line:
            self.on_line(line)
        if line.strip():
            self._tail.append(line[:300])
        if any(type(e).__name__ in ("Figure", "Failure", "Milestone") for e in events):  # a phase: the watchdog
            self._write_state()
        if any(isinstance(e, Failure) and e.kind == "engine_dead" for e in events):
            self._launch_failed.set()  # the API process may linger, answering 500s: end this launch

    async def _terminate(self) -> None:
        """SIGTERM to the group (and the API process's descendants), SIGKILL after stop_timeout,
        then check with NVML that the GPU memory those processes held is released."""
        # only on this path (stop, reap, a foreign listener): the supervisor starts quickly
        from backend.server import orphans, procs

        pids = procs.group_members(self._pgid) if self._pgid else []
        if self.proc and self.proc.returncode is None:
            pids = [self.proc.pid, *procs.descendants(self.proc.pid), *pids]
        if not pids:
            return
        timeout = float(self.settings.console_cfg.stop_timeout)
        if self.ready_at is None:  # still loading: nothing to drain, and vLLM may ignore SIGTERM then
            timeout = min(timeout, STARTING_STOP_TIMEOUT_S)
        done = await asyncio.to_thread(orphans.stop_verified, self._pgid, sorted(set(pids)), timeout,
                                       self.gpus)
        self.stop_report = done.summary()
        self.gpu_release = done.release.to_dict()
        self._note_survivors(done.stop.survivors)

    def _note_survivors(self, pids: list[int]) -> None:
        """Remember what a stop left alive, pinned to start times, for `qwen-tui stop` to check again."""
        self.stop_survivors += [{"pid": p, "create_time": statefile.create_time(p)} for p in pids]

    async def _run_once(self) -> int:
        if self.adopt is not None:
            await self._attach()
        else:
            self.adopted_argv, self._log_offset = None, 0
            await self._spawn()
        assert self.log_path is not None  # _spawn set it
        with open(self.log_path, "rb") as log:
            log.seek(self._log_offset)
            reader = asyncio.create_task(self._read_output(log))
            watcher = asyncio.create_task(health.watch(self))  # READY, then /health failing
            stop_wait = asyncio.create_task(self._stop_requested.wait())
            assert self.proc
            exited = asyncio.create_task(self._wait_exit())
            failed = asyncio.create_task(self._launch_failed.wait())
            done, _ = await asyncio.wait({exited, stop_wait, failed}, return_when=asyncio.FIRST_COMPLETED)
            if stop_wait in done and not exited.done():
                self.parser.stop_requested()
                self.stopping_at = time.time()
                self._set("stopping", "SIGTERM to the process group")
                await self._terminate()
            elif failed in done and not exited.done():
                why = (self.failure or {}).get("message") or "the engine died"
                self._set("failed", f"{why}; stopping what is left of this launch")
                await self._terminate()
            failed.cancel()
            rc = await exited
            if not self._stop_requested.is_set():
                # Say so at once; the diagnosis follows once the log is drained. What the dead
                # launch left is published as ours first, so no orphan scan offers to kill it.
                from backend.server import procs

                self.reaping_pids = procs.group_members(self._pgid) if self._pgid else []
                # "stopping", not "failed": failed means final (and a start may begin), and whether
                # this one is restarted is decided once the log is drained (_run_loop)
                ended = exit_text(rc) if rc < 0 else f"exit code {rc}"
                self._set("stopping", f"{ended}; cleaning up what it left"
                          + (f" (pids {', '.join(map(str, self.reaping_pids))})" if self.reaping_pids else ""))
                try:
                    await self._reap_leftovers()  # orphans hold the pipe open: clean them, then drain
                finally:
                    self.reaping_pids = []
            self._output_done.set()
            try:
                await asyncio.wait_for(reader, timeout=5)
            except asyncio.TimeoutError:
                reader.cancel()
            for task in (watcher, stop_wait):
                task.cancel()
            if self._stop_requested.is_set():
                await self._reap_leftovers()
        return rc

    async def _wait_exit(self) -> int:
        """The exit code, as soon as the process is gone. Not `proc.wait()`: on Python 3.11 it also
        waits for the stdout pipe to close, which orphaned EngineCore/Worker processes hold open."""
        assert self.proc
        while self.proc.returncode is None:
            await asyncio.sleep(0.05)
        return self.proc.returncode

    async def _reap_leftovers(self) -> None:
        """After the API process is gone, make sure nothing of its group survives."""
        # only on this path (stop, reap, a foreign listener): the supervisor starts quickly
        from backend.server import orphans, procs

        if self._pgid is None:
            return
        left = procs.group_members(self._pgid)
        if left:
            done = await asyncio.to_thread(orphans.stop_verified, self._pgid, left, 5.0, self.gpus)
            self.stop_report = f"{self.stop_report or ''}; leftovers: {done.summary()}".strip("; ")
            self.gpu_release = done.release.to_dict()
            self._note_survivors(done.stop.survivors)

    # -- the loop ------------------------------------------------------------------------------
    async def run(self) -> int:
        """Run until stopped (exit code 0) or failed for good (1)."""
        if self.gpus is None and self.settings.planner_cfg.device != "cpu":
            from backend.gpu import GpuMonitor  # NVML bindings only when a monitor is made here
            from backend.server.orphans import configured_gpus

            self.gpus = await asyncio.to_thread(GpuMonitor, configured_gpus(self.settings.env))
        from backend import recorder  # the flight recorder's thread and the idle timer
        from backend.server import idle_sleep  # the flight recorder's thread and the idle timer

        self.recorder = recorder.attach(self)
        idle = asyncio.create_task(idle_sleep.watch(self))
        try:
            return await self._run_loop()
        finally:
            idle.cancel()
            await asyncio.to_thread(self.recorder.stop)
            if self.gpus is not None:
                self.gpus.shutdown()

    async def _run_loop(self) -> int:
        while True:
            rc = await self._run_once()
            if self._stop_requested.is_set():
                self.parser.process_exited(rc)
                self._set("stopped", self.stop_report or f"exit code {rc}")
                return 0
            self.parser.process_exited(rc)
            self.failure = self.failure or self.parser.snapshot().get("failure") or {
                "kind": "unknown", "message": f"vLLM {exit_text(rc)}",
                "fix": KILLED_FIX if rc < 0 else "see the log"}
            kind = self.failure.get("kind")
            repeated = self._record_attempt(rc)
            now = time.time()
            self.failures.append(now)
            window = float(self.settings.console_cfg.restart_window_s)
            while self.failures and now - self.failures[0] > window:
                self.failures.popleft()
            # one state for the decision, written once: "failed" only when it is final (no "failed"
            # for a moment before "backoff")
            what = exit_text(rc) if rc < 0 else f"exit code {rc}"
            what += "" if kind == "unknown" and rc < 0 else f": {kind}"
            final = None
            if self.restart_policy != "on-failure":
                final = what
            elif is_permanent(kind, was_ready=self.attempts[-1]["was_ready"]):
                final = f"{what} (not restarted: it would fail the same way)"
            elif repeated:
                final = f"failed the same way twice: not restarted ({kind}: {self.failure.get('message')})"
            elif len(self.failures) >= int(self.settings.console_cfg.restart_max_failures):
                final = f"gave up after {len(self.failures)} failures in {window:.0f} s"
            if final is not None:
                self._set("failed", final)
                return 1
            delay = backoff_delay(len(self.failures))
            self._set("backoff", f"restart in {delay:.0f} s (failure {len(self.failures)})")
            try:
                await asyncio.wait_for(self._stop_requested.wait(), timeout=delay)
                # the failed launch was reaped before the backoff: its cleanup is not this stop's report
                self.stop_report, self.stop_survivors = "stopped during backoff: nothing was running", []
                self._set("stopped", self.stop_report)
                return 0
            except asyncio.TimeoutError:
                self.restarts += 1

    def _record_attempt(self, rc: int) -> bool:
        """Remember this failed attempt; True when it failed before READY with the same root cause as
        the attempt before it, which also failed before READY, whatever the kind (a loop no backoff
        will break). A launch that had been READY keeps its restarts (a kill, a crash while serving)."""
        f = self.failure or {}
        rec = {"attempt": self.restarts + 1, "kind": f.get("kind"), "message": f.get("message"),
               "fix": f.get("fix"), "context": f.get("context") or [],
               "log_path": str(self.log_path) if self.log_path else None, "started_at": self.started_at,
               "ended_at": time.time(), "exit_code": rc, "was_ready": self.ready_at is not None}
        prev = self.attempts[-1] if self.attempts else None
        self.attempts.append(rec)
        del self.attempts[:-ATTEMPTS_KEPT]
        return bool(prev and not prev["was_ready"] and not rec["was_ready"] and prev["kind"] == rec["kind"]
                    and same_cause(prev.get("message"), str(rec.get("message") or "")))

    def request_stop(self) -> None:
        self._stop_requested.set()

    def control_requested(self) -> asyncio.Task[Any] | None:
        """SIGUSR1: a sleep / wake request waits in the request file (backend/server/sleep.py)."""
        req = sleep.take_request(self.state_path)
        if req:
            self._control_task = asyncio.ensure_future(self.sleep.handle(self, req))  # held: not collected
            return self._control_task
        return None

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, lambda: None)  # an SSH drop never stops the server
        loop.add_signal_handler(sleep.CONTROL_SIGNAL, self.control_requested)
