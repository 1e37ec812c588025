"""Every message the console's workers post, in one place. Workers never touch widgets."""

from __future__ import annotations

from typing import Any

from textual.message import Message

from backend.supervisor_client import Poll


class ServerPolled(Message):
    """A fresh look at the supervisor's state file and the new log lines."""

    def __init__(self, poll: Poll) -> None:
        super().__init__()
        self.poll = poll


class ActionFinished(Message):
    """start / stop / restart finished; `text` says what was done."""

    def __init__(self, action: str, text: str, error: bool = False) -> None:
        super().__init__()
        self.action, self.text, self.error = action, text, error


class GpusSampled(Message):
    """One NVML reading of every card (a list of backend.gpu.GpuSample) and who holds each card
    (GPU index -> list of backend.orphans.Holder)."""

    def __init__(self, samples: list, holders: dict | None = None) -> None:
        super().__init__()
        self.samples, self.holders = samples, holders or {}


class PlanReady(Message):
    """The memory ledger for the current settings (Ledger.to_dict()), or why there is none."""

    def __init__(self, plan: dict | None, error: str | None = None) -> None:
        super().__init__()
        self.plan, self.error = plan, error


class SettingSaved(Message):
    """A settings edit was written (`saved`: a backend.setting_rows.Saved) or refused (`error`)."""

    def __init__(self, saved=None, error: str | None = None) -> None:
        super().__init__()
        self.saved, self.error = saved, error


class OrphansScanned(Message):
    """Before a start: processes no supervisor owns (a backend.orphans.OrphanScan). `done` says
    what already happened (a restart's stop)."""

    def __init__(self, scan, done: str = "") -> None:
        super().__init__()
        self.scan, self.done = scan, done


class OrphanKilled(Message):
    """A targeted kill finished: `stopped` (backend.orphans.Stopped) and a fresh scan, or `error`."""

    def __init__(self, pid: int, stopped=None, scan=None, error: str | None = None) -> None:
        super().__init__()
        self.pid, self.stopped, self.scan, self.error = pid, stopped, scan, error


class ChatDelta(Message):
    """Reply text that arrived (deltas coalesced for about 50 ms)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class ChatFinished(Message):
    """A reply ended: `result` (backend.chat.ChatResult) with its figures, or `error` and `fix`.
    Bubbles up so the main screen can put the measured tokens/s beside the ledger's ceiling."""

    def __init__(self, result, line: str, error: str | None = None, fix: str | None = None,
                 cancelled: bool = False) -> None:
        super().__init__()
        self.result, self.line, self.error, self.fix, self.cancelled = result, line, error, fix, cancelled


class DoctorReady(Message):
    """The pre-flight checks (a list of backend.doctor.Check), or why they could not run."""

    def __init__(self, checks: list, error: str | None = None) -> None:
        super().__init__()
        self.checks, self.error = checks, error


class MetricsSampled(Message):
    """One read of the server's /metrics: `snapshot` (backend.metrics.Snapshot.to_dict()) and the
    rates since the last read, or `error`."""

    def __init__(self, snapshot: dict | None, rates: dict, error: str | None = None) -> None:
        super().__init__()
        self.snapshot, self.rates, self.error = snapshot, rates, error


class BenchProgress(Message):
    """A load-test request started or ended."""

    def __init__(self, done: int, in_flight: int, total: int) -> None:
        super().__init__()
        self.done, self.in_flight, self.total = done, in_flight, total


class BenchFinished(Message):
    """A load test ended: `report` is the `bench --json` object, or `error` why it did not run."""

    def __init__(self, report: dict | None, error: str | None = None) -> None:
        super().__init__()
        self.report, self.error = report, error


class ReportReady(Message):
    """The triage report (backend/report.py) as Markdown, with what was redacted; or why it could not be built."""

    def __init__(self, text: str | None, redactions: str = "", error: str | None = None) -> None:
        super().__init__()
        self.text, self.redactions, self.error = text, redactions, error


class ClusterPolled(Message):
    """One look at every box and the router (backend.cluster.ops.ClusterStatus), or why there is none."""

    def __init__(self, status: object | None, error: str | None = None) -> None:
        super().__init__()
        self.status, self.error = status, error


class ClusterStep(Message):
    """A line of progress from a drain / undrain / rolling restart; `done` on its last line."""

    def __init__(self, text: str, done: bool = False, error: bool = False) -> None:
        super().__init__()
        self.text, self.done, self.error = text, done, error


class LedgerPreviewed(Message):
    """The ledger for a value being typed in the settings editor (backend.ledger.preview.Preview)."""

    def __init__(self, preview: Any, typed: str) -> None:
        super().__init__()
        self.preview, self.typed = preview, typed


class ProfilesPlanned(Message):
    """The ledger's verdict on every workload profile (backend.profiles.Verdict), or why not."""

    def __init__(self, verdicts: list[Any], error: str | None = None) -> None:
        super().__init__()
        self.verdicts, self.error = verdicts, error


class SweepEvent(Message):
    """A concurrency sweep moved: a backend.sweep.LevelProgress, or a finished level's row (dict)."""

    def __init__(self, event: Any) -> None:
        super().__init__()
        self.event = event


class SweepFinished(Message):
    """A sweep ended: `result` is the `bench --sweep --json` object (saved), or `error` why it did not run."""

    def __init__(self, result: dict | None, previous: dict | None = None, error: str | None = None) -> None:
        super().__init__()
        self.result, self.previous, self.error = result, previous, error


class PullStarted(Message):
    """A `qwen-tui pull` process was started (its pid and log), or why not."""

    def __init__(self, pid: int | None, log: str | None, error: str | None = None) -> None:
        super().__init__()
        self.pid, self.log, self.error = pid, log, error


class PullPolled(Message):
    """The pull's state file (backend/pull/state.py), whether its process is that pull and alive, and
    why the file was not believed."""

    def __init__(self, state: dict | None, alive: bool, why: str | None = None) -> None:
        super().__init__()
        self.state, self.alive, self.why = state, alive, why
