"""LogParser: fed one vLLM output line at a time, keeps the startup state and emits events.

Hot path: every line is cleaned (\\r, ANSI, process tag, log header) and then only tested with
substring checks; a regex runs only when its key substring is present. Failure signatures are only
looked for on error-ish lines (ERROR/CRITICAL records, uvicorn errors, bare stderr/traceback lines),
so INFO text such as "If you are running out of memory, ..." never reads as a failure.
"""

from __future__ import annotations

import calendar
import re
import time
from collections import deque
from typing import Any, Iterable

from backend.logparse import diagnose, patterns
from backend.logparse.envelope import Ranks
from backend.logparse.envelope import split as split_envelope
from backend.logparse.events import PHASE_INDEX, TERMINAL_PHASES, Event, Failure, Figure, Milestone, is_permanent
from backend.logparse.figures import COMPLETE_ENDS, FIGURE_TABLE, HOLD_KEYS, join_held
from backend.logparse.figures import cmdline as figure_cmdline
from backend.logparse.marker import PREFIX as _MARKER_PREFIX
from backend.logparse.marker import Launch, parse_marker, server_python
from backend.logparse.report import report as parse_report

_LINE_SPLIT = re.compile(r"\r\n|\r|\n")
_CLEAN_EXIT = frozenset((0, -15, 143, -2, 130))  # exit, SIGTERM (also via a shell), SIGINT
_CONTRACT_FIGURES = ("weights_gib", "weights_seconds", "kv_cache_gib", "kv_cache_tokens", "gpu_blocks",
                     "max_concurrency", "max_concurrency_tokens", "cuda_graph_seconds", "init_engine_seconds",
                     "listen_url")
# Per-worker figures: the snapshot shows the one that binds (smallest KV cache, largest/slowest load).
_RANK_AGG = {"weights_gib": max, "weights_seconds": max, "weights_read_seconds": max, "kv_cache_gib": min,
             "cuda_graph_seconds": max, "cuda_graph_gib": max, "compile_seconds": max, "dynamo_seconds": max,
             "requested_gib": min, "node_total_gib": min, "non_kv_gib": max, "device_free_gib": min,
             "kv_cache_in_use_gib": min, "kv_cache_memory_to_requested": min, "kv_cache_memory_to_gpu": min}
_ENGINE_LEVELS = {"weak": 1, "strong": 2, "explicit": 3}
_ERRORISH = frozenset(("E", "C", None))
_CODE_ENDS = ("(", ",", "[", "{", "\\", "+", "=")  # a code line that goes on on the next one


class LogParser:
    """Feed it lines (`feed`), tell it when the process exits (`process_exited`), read `snapshot()`."""

    def __init__(self, year: int | None = None) -> None:
        self._year = year or time.localtime().tm_year
        self.phase = "starting"
        self.vllm_version: str | None = None
        self.engine: str | None = None
        self._engine_level = 0
        self.figures: dict[str, Any] = {}
        self.rank_figures: dict[str, dict[int, Any]] = {}
        self.info: dict[str, Any] = {}          # settings read from the log: port, max_model_len, ...
        self.timeline: list[Milestone] = []
        self.exit_code: int | None = None
        self.lines = 0
        self.bad_lines = 0
        self._started = False
        self.was_ready = False
        self.weights_done = False
        self.stopping = False
        self.hard_failure: Failure | None = None     # hard diagnosis
        self._failure_sent: Failure | None = None
        self._demoted: list[Failure] = []        # diagnoses the server then got past (it became ready)
        self._hints: dict[str, Failure] = {}     # soft evidence, used when the process fails undiagnosed
        self.kv_fail: dict[str, Any] | None = None
        self._wrapper: str | None = None
        self._last_error: str | None = None      # last error message (not a traceback body line)
        self._last_error_any: str | None = None
        self._last_frame: str | None = None
        self.frames: deque[str] = deque(maxlen=48)
        self.recent: deque[str] = deque(maxlen=6)
        self._tb_procs: set[Any] = set()
        self._ranks = Ranks()                    # process tag -> worker rank
        self._ts_key: str | None = None
        self._ts_val: float | None = None
        self._last_t: float | None = None
        self.launch: Launch | None = None        # from the supervisor's launch marker, when the log has one
        self.last_progress = "starting"          # the last startup phase reached (kept once failed)
        self.kv_token_lines: list[int] = []     # every "KV cache size" line (one per worker with TP>1)
        self.graph_bars: dict[str, int] = {}    # CUDA-graph capture bar -> graphs captured
        self._code: dict[Any, tuple[Any, ...]] = {}        # process -> (lines since its last frame, open brackets)
        self._cont: tuple[Any, ...] | None = None          # (handler, text, process, lines): a message that may wrap
        self._held_fig: tuple[Any, ...] | None = None      # (handler, text, rank, t): a figure line a wrap may have cut
        self._tail_exc: str | None = None        # the exception line that ended the last traceback
        # the root cause: the first exception (or "died unexpectedly") line of the process that failed first,
        # and the wrapper lines after it; both reset when the server gets ready (what came before was not fatal)
        self._root: str | None = None
        self._context: list[str] = []

    # -- public API ---------------------------------------------------------------------------------

    def feed(self, line: Any, t: float | None = None) -> list[Event]:
        """Parse one line of vLLM output (a chunk with newlines is split). Never raises."""
        try:
            if line.__class__ is not str:
                line = _decode(line)
            if "^M" in line:  # a carriage return pasted as text (`cat -v`)
                line = line.replace("^M", "\r")
            if "\n" in line or "\r" in line:
                # several lines, CRLF endings, or tqdm redraws ("\rbar 10%\rbar 20%"): each part on its own
                events: list[Event] = []
                for part in _LINE_SPLIT.split(line):
                    if part and not part.isspace():
                        events.extend(self._feed1(part, t))
                return events
            return self._feed1(line, t)
        except Exception:  # garbage must never take the supervisor down
            self.bad_lines += 1
            return []

    def process_exited(self, returncode: int | None, stop_requested: bool | None = None) -> list[Event]:
        """The vLLM process ended. 0 / SIGTERM / SIGINT (or any code after `stop_requested()`) with no
        failure diagnosed before the stop -> `stopped`; anything else -> `failed` with a diagnosis."""
        ev: list[Event] = []
        try:
            self.exit_code = returncode
            if stop_requested:
                self.stopping = True
            t = self._last_t
            if (returncode in _CLEAN_EXIT or self.stopping) and self.phase != "failed":
                self.to_phase("stopped", t, ev)
                return ev
            if self.hard_failure is None:
                self.hard_failure = self._fallback_failure(returncode)
            self.to_phase("failed", t, ev)
            self._send_failure(ev)
        except Exception:
            self.bad_lines += 1
        return ev

    def end_of_log(self) -> list[Event]:
        """The whole log has been read and no exit code comes (a file given to parse-log). A log that ends
        in an uncaught traceback, with no startup progress after it, failed there."""
        ev: list[Event] = []
        try:
            if (self._tail_exc is not None and not self.stopping and self.phase not in TERMINAL_PHASES
                    and self.phase != "ready"):
                if self.hard_failure is None:
                    self.hard_failure = diagnose.uncaught(self, self._tail_exc)
                self.to_phase("failed", self._last_t, ev)
                self._send_failure(ev)
        except Exception:
            self.bad_lines += 1
        return ev

    def failure_is_permanent(self) -> bool | None:
        """Whether the current failure would come back unchanged on a restart (None: no failure)."""
        f = self.current_failure()
        return None if f is None else is_permanent(f.kind, self.was_ready)

    def report(self) -> dict[str, Any]:
        """snapshot() plus everything the text summary shows (parse-log --json)."""
        return parse_report(self)

    def stop_requested(self) -> None:
        """The supervisor asked the server to stop: errors printed while it shuts down are not failures."""
        self.stopping = True

    def snapshot(self) -> dict[str, Any]:
        """The state in the parse-log --json contract (exactly these keys)."""
        f = self.figures
        failure = self.current_failure()
        return {
            "vllm_version": self.vllm_version,
            "engine": self.engine,
            "ready": self.phase == "ready",
            "phase": self.phase,
            "weights_gib": f.get("weights_gib"),
            "weights_seconds": f.get("weights_seconds"),
            "kv_cache_gib": f.get("kv_cache_gib"),
            "kv_cache_tokens": f.get("kv_cache_tokens"),
            "gpu_blocks": f.get("gpu_blocks"),
            "max_concurrency": f.get("max_concurrency"),
            "max_concurrency_tokens": f.get("max_concurrency_tokens"),
            "cuda_graph_seconds": f.get("cuda_graph_seconds"),
            "init_engine_seconds": f.get("init_engine_seconds"),
            "listen_url": f.get("listen_url"),
            "failure": failure.as_dict() if failure else None,
        }

    @property
    def state(self) -> dict[str, Any]:
        return self.snapshot()

    def current_failure(self) -> Failure | None:
        if self.hard_failure is not None and self.phase == "failed":
            return self._rooted(self.hard_failure)
        if self.phase == "failed":
            return self._rooted(self._fallback_failure(self.exit_code))
        return None

    def _rooted(self, f: Failure) -> Failure:
        """A failure whose line is only a wrapper or a bare guess (unknown, engine_dead) says the root cause
        instead; the wrapper lines after the root cause (and the line it replaced) are kept as context."""
        root = self._root
        if root is None:
            return f
        replace = f.kind in ("unknown", "engine_dead") and not f.message.startswith(root)
        message = root if replace else f.message
        seen = [*self._context, f.message] if replace else self._context
        context = tuple(c for c in dict.fromkeys(seen) if not message.startswith(c) and not c.startswith(message))
        return f if (message, context) == (f.message, f.context) else Failure(f.kind, message, f.fix, context[-4:])

    @property
    def per_rank(self) -> dict[str, dict[int, Any]]:
        """Per-worker figures, only those whose value differs between ranks."""
        return {k: dict(sorted(v.items())) for k, v in self.rank_figures.items()
                if len(v) > 1 and len(set(v.values())) > 1}

    @property
    def every_rank(self) -> dict[str, dict[int, Any]]:
        """Per-worker figures of a log with more than one worker, equal or not (parse-log's and
        status's `per_rank`): TP=2 shows both ranks' KV lines, even when they agree."""
        return {k: dict(sorted(v.items())) for k, v in self.rank_figures.items() if len(v) > 1}

    def phase_durations(self) -> list[tuple[str, float | None, float | None]]:
        """(phase, start, seconds until the next phase or None) for each milestone."""
        out = []
        for i, m in enumerate(self.timeline):
            nxt = self.timeline[i + 1].t if i + 1 < len(self.timeline) else None
            dur = nxt - m.t if (nxt is not None and m.t is not None) else None
            out.append((m.phase, m.t, dur))
        return out

    # -- line handling ------------------------------------------------------------------------------

    def _feed1(self, line: str, t: float | None) -> list[Event]:
        self.lines += 1
        if "\x1b" in line:
            line = patterns.ANSI.sub("", line)
        if "^[[" in line:
            line = patterns.LITERAL_ANSI.sub("", line)
        if not line:
            return []
        if line[0] == "q" and line.startswith(_MARKER_PREFIX):
            return self._launched(line, t)
        proc, lvl, ts, fileinfo, msg = split_envelope(line)
        if t is None:
            if ts is not None:
                t = self._ts(ts)
            else:
                t = self._last_t
        if t is not None:
            if self._last_t is None and self.timeline and self.timeline[0].t is None:
                self.timeline[0] = Milestone(self.timeline[0].phase, t)  # started before the first stamp
            self._last_t = t
        ev: list[Event] = []
        if not self._started:
            self._started = True
            self.timeline.append(Milestone("starting", t))
            ev.append(self.timeline[-1])
        rank = self._ranks.of(self, proc) if proc is not None else None
        if fileinfo is not None and self._engine_level == 0:
            base = fileinfo.rpartition(":")[0].rpartition("/")[2]
            if base in patterns.V1_FILES:
                self.set_engine("v1", "weak", ev)
            elif base in patterns.V0_FILES:
                self.set_engine("v0", "weak", ev)
        if not msg or msg.isspace():
            return ev
        held, self._held_fig = self._held_fig, None
        if held is not None and lvl is None and proc is None:
            join_held(self, held, msg, ev)  # and the line is still read as itself below
        if lvl != "E" and lvl != "C" and (lvl is not None or msg[0] != " "):
            for key, handler in FIGURE_TABLE:
                if key in msg:
                    n = len(ev)
                    handler(self, msg, rank, t, ev)
                    if key in HOLD_KEYS and (not any(isinstance(e, Figure) for e in ev[n:])
                                             or not msg.rstrip().endswith(COMPLETE_ENDS)
                                             or msg.rstrip()[-2:-1].isdigit() and msg.rstrip()[-1] == "."):
                        # cut by a wrap? the next bare line may end it
                        self._held_fig = (handler, msg, rank, t, {e.name for e in ev[n:] if isinstance(e, Figure)})
                    break
        if lvl in _ERRORISH:
            self._errorish(msg, lvl, proc, t, ev)
        elif lvl == "W":
            for key, kind in diagnose.SOFT_WARN:
                if key in msg:
                    self._hints.setdefault(kind, diagnose.soft_failure(self, kind, msg))
        return ev

    def _errorish(self, msg: str, lvl: str | None, proc: Any, t: float | None, ev: list[Event]) -> None:
        """An ERROR/CRITICAL record or a bare line: tracebacks, exception lines, failure signatures."""
        pkey = proc[2] if proc is not None else None
        s = msg.lstrip()
        if not s:
            return
        cont, self._cont = self._cont, None
        if s.startswith("File \"") or s.startswith("File '"):
            self.frames.append(s)
            self._last_frame = s
            self._code[pkey] = (0, 0)
            if any(w in s for w in diagnose.NCCL_FRAME_WORDS):
                self._hints.setdefault("nccl_p2p", diagnose.soft_failure(self, "nccl_p2p", s))
            return
        if "Traceback (most recent call" in s:
            self._code.pop(pkey, None)
            if pkey not in self._tb_procs:
                self.frames.clear()
            if not s.startswith("Traceback"):  # "EngineCore hit an exception: Traceback (most recent ..."
                self._tb_procs.discard(pkey)
                self._errorish(s.partition("Traceback (most recent call")[0], lvl, proc, t, ev)
            self._tb_procs.add(pkey)
            return
        code = self._code.get(pkey)
        ended_code = False
        if code is not None:  # the source lines under a frame are code, never a message or a signature
            n, depth = code
            if (msg[0] in " \t" or s[:1] in "^~" or s.startswith("raise ")
                    or (lvl is None and (n == 0 or depth > 0 or s.endswith(_CODE_ENDS))
                        and not patterns.EXCEPTION_LIKE.match(s))):
                depth += s.count("(") + s.count("[") + s.count("{") - s.count(")") - s.count("]") - s.count("}")
                self._code[pkey] = (n + 1, max(depth, 0))  # a statement over several lines: until it closes
                return
            del self._code[pkey]
            ended_code = True
        elif s.startswith("raise ") and s.endswith(("(", ")")):
            return
        if lvl is not None:
            self._last_error_any = s
        if not self.stopping and (patterns.EXCEPTION.match(s) or any(k in s for k in diagnose.DIED)) \
                and not s.split(":", 1)[0].endswith("Warning"):
            if diagnose.is_wrapper(s):
                if s not in self._context:
                    self._context.append(s)
            elif self._root is None:
                self._root = s
        in_tb = pkey in self._tb_procs
        if patterns.EXCEPTION.match(s):
            if in_tb or ended_code:
                self._tail_exc = s
            self._tb_procs.discard(pkey)
            self._last_error = s
        elif in_tb:
            if lvl is not None or msg[0] in " \t" or s[:1] in "^~" or s.startswith("raise "):
                return  # the code line under a frame
            self._tb_procs.discard(pkey)  # a bare line at column 0: the traceback is over
            in_tb = False
        elif lvl is not None and s[:1] not in "^~":
            self._last_error = s
        if cont is not None and cont[2] == pkey:  # the rest of a message wrapped onto this line
            f = diagnose.rejoin(self, cont[0], cont[1], s)
            if f is not None and self._rediagnosed(f, t, ev):
                return
            if f is None and cont[3] < 2 and lvl is None:
                self._cont = (cont[0], f"{cont[1]} {s}", pkey, cont[3] + 1)
        self.recent.append(s)
        failure = None
        for key, handler in diagnose.HARD:
            if key in s:
                failure = handler(self, s)
                if handler in diagnose.WRAPPED:
                    self._cont = (handler, s, pkey, 0)
                if failure is not None:
                    break
        if failure is None and self.kv_fail is not None:
            failure = diagnose.kv_continuation(self, s)
            if failure is not None:
                self.hard_failure = failure
                if self.phase == "failed":
                    self._send_failure(ev)
                return
        if failure is not None:
            self._diagnosed(failure, t, ev)
            return
        wrapper = None
        if s.startswith("Process ") and patterns.MP_PROCESS_DIED.match(s):
            wrapper = s
        else:
            for key in diagnose.WRAPPERS:
                if key in s:
                    wrapper = s
                    break
        if wrapper is not None and not self.stopping:
            self._last_error = s
            if "EngineCore" in s or "Engine core" in s or "WorkerProc" in s:
                self.set_engine("v1", "strong", ev)
            elif "Engine process" in s or "VllmWorkerProcess" in s:
                self.set_engine("v0", "strong", ev)
            if self.was_ready:
                self._hints.setdefault("engine_dead", diagnose.soft_failure(self, "engine_dead", s))
            self._wrapper = self._wrapper or s
            self.to_phase("failed", t, ev)

    def _rediagnosed(self, failure: Failure, t: float | None, ev: list[Event]) -> bool:
        """A wrapped message read whole: it replaces the diagnosis made from its first line."""
        cur = self.hard_failure
        if cur is not None and cur.kind == failure.kind and not self.stopping:
            self.hard_failure = failure
            if self.phase == "failed":
                self._send_failure(ev)
            return True
        self._diagnosed(failure, t, ev)
        return self.hard_failure is failure

    def _diagnosed(self, failure: Failure, t: float | None, ev: list[Event]) -> None:
        if self.stopping:
            return
        cur = self.hard_failure
        if cur is not None:
            allowed = diagnose.REPLACEABLE.get(cur.kind, frozenset())
            if cur.kind == failure.kind or not (allowed is None or failure.kind in allowed):
                return
        self.hard_failure = failure
        self.to_phase("failed", t, ev)
        self._send_failure(ev)

    def _send_failure(self, ev: list[Event]) -> None:
        f = self.hard_failure
        if f is not None and f is not self._failure_sent:
            self._failure_sent = f
            ev.append(f)

    def _fallback_failure(self, rc: int | None) -> Failure:
        for kind in ("missing_cuda_library", "nccl_p2p", "engine_dead"):
            h = self._hints.get(kind)
            if h is not None:
                last = self._last_error
                if h.message.startswith("File ") and last and patterns.EXCEPTION.match(last):
                    return Failure(h.kind, last, h.fix)  # the exception line says more than the frame
                return h
        msg = self._last_error or self._wrapper or self._last_frame or self._last_error_any
        how = f"vLLM exited with code {rc}" if rc is not None else "vLLM failed"
        if rc is not None and rc < 0:  # a signal ended it: that is the cause, whatever an earlier line said
            import signal  # the name of a signal: only after a kill

            name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else ""
            how = f"vLLM was killed by signal {-rc}" + (f" ({name})" if name else "")
            return Failure("unknown", how, f"{name or 'the signal'} came from outside vLLM: the kernel's OOM "
                           "killer (see `dmesg`), a user or a forced stop; it is restarted if console.restart allows")
        if rc == 137:
            how = "vLLM was killed (SIGKILL: the kernel's OOM killer, or a forced stop)"
        return Failure("unknown", msg or how,
                       f"{how} without a known failure signature: read the error line and the traceback "
                       f"above it in the log")

    # -- state changes --------------------------------------------------------------------------

    def to_phase(self, phase: str, t: float | None, ev: list[Event] | None) -> None:
        cur = self.phase
        if cur == phase:
            return
        if phase in TERMINAL_PHASES:
            if cur in TERMINAL_PHASES:
                return
        elif phase == "ready":
            if cur == "stopped" or (cur == "failed" and self.was_ready):
                return
            if cur == "failed":  # it came up after all: what looked fatal was not
                if self.hard_failure is not None:
                    self._demoted.append(self.hard_failure)
                self.hard_failure = None
                self._wrapper = None
            self._root, self._context = None, []
        elif cur in TERMINAL_PHASES or PHASE_INDEX[phase] <= PHASE_INDEX[cur]:
            return
        self.phase = phase
        if phase not in TERMINAL_PHASES:
            self.last_progress = phase
            self._tail_exc = None  # it went on after that traceback
        if phase == "ready":
            self.was_ready = True
        m = Milestone(phase, t)
        self.timeline.append(m)
        if ev is not None:
            ev.append(m)

    def record_figure(self, name: str, value: Any, rank: int | None, ev: list[Event] | None) -> None:
        self.figures[name] = value
        if ev is not None:
            ev.append(Figure(name, value, rank))

    def set_rank_figure(self, name: str, value: Any, rank: int | None, ev: list[Event] | None) -> None:
        r = 0 if rank is None else rank
        per = self.rank_figures.setdefault(name, {})
        per[r] = value
        self.figures[name] = _RANK_AGG.get(name, max)(per.values()) if len(per) > 1 else value
        if ev is not None:
            ev.append(Figure(name, value, r))

    def set_engine(self, engine: str, level: str, ev: list[Event] | None) -> None:
        lv = _ENGINE_LEVELS[level]
        if lv > self._engine_level or (lv == 3 and engine != self.engine):
            self._engine_level = lv
            if engine != self.engine:
                self.engine = engine
                if ev is not None:
                    ev.append(Figure("engine", engine, None))

    def set_version(self, version: str, ev: list[Event]) -> None:
        version = version.strip().rstrip(",.")
        if not version or version == self.vllm_version:
            return
        self.vllm_version = version
        ev.append(Figure("vllm_version", version, None))
        if self._engine_level == 0:
            m = patterns.VERSION_NUM.match(version)
            if m:
                mm = (int(m.group(1)), int(m.group(2)))
                self.set_engine("v0" if mm < (0, 8) else "v1", "weak", ev)

    def _launched(self, line: str, t: float | None) -> list[Event]:
        """The supervisor's launch marker: anchor the timeline at the launch, read the command line."""
        launch = parse_marker(line)
        if launch is None:
            return []
        self.launch = launch
        self._year = launch.year
        at = t if t is not None else launch.local  # the caller's clock, else the one vLLM's stamps use
        ev: list[Event] = []
        if not self._started:
            self._started = True
            self.timeline.append(Milestone("starting", at))
            ev.append(self.timeline[-1])
        elif self.timeline and self.timeline[0].phase == "starting":
            self.timeline[0] = Milestone("starting", at)
        self._last_t = at
        figure_cmdline(self, " " + " ".join(launch.argv), None, at, ev)
        py = server_python(launch.argv)
        if py:
            self.info["server_python"] = py
        return ev

    # -- helpers --------------------------------------------------------------------------------

    def _ts(self, key: str) -> float | None:
        if key == self._ts_key:
            return self._ts_val
        try:
            val = float(calendar.timegm((self._year, int(key[0:2]), int(key[3:5]), int(key[6:8]),
                                         int(key[9:11]), int(key[12:14]), 0, 0, 0)))
        except (ValueError, OverflowError):
            return self._last_t
        prev = self._ts_val
        if prev is not None and val < prev - 180 * 86400:  # December -> January
            self._year += 1
            val += 365 * 86400
        self._ts_key, self._ts_val = key, val
        return val


def _decode(line: Any) -> str:
    if isinstance(line, (bytes, bytearray, memoryview)):
        return bytes(line).decode("utf-8", errors="replace")
    return "" if line is None else str(line)


def parse_lines(lines: Iterable[Any]) -> LogParser:
    """Feed every line of an iterable (a file, a list) to a new parser and return it."""
    p = LogParser()
    feed = p.feed
    for line in lines:
        if line.__class__ is str and line.endswith("\n"):
            line = line[:-1]
        feed(line)
    p.end_of_log()
    return p

