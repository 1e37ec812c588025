"""Every message the console's workers post, in one place. Workers never touch widgets.

Each is a Message with a typed __init__, as Textual's own are: a message is an event, equal only to
itself. They were dataclasses (eq=False); making 25 of them cost ~2.5 ms of the console's start,
the compiling of their generated __init__ and __repr__ (issue 28). The backend types are imported
for the type checker only: the console's first frame must not wait for NVML, httpx or the doctor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.message import Message

from backend.server.client import Poll

if TYPE_CHECKING:
    from backend.bench.sweep import LevelProgress
    from backend.chat.context_budget import Budget
    from backend.chat.conversation import Conversation
    from backend.chat.stream import ChatResult
    from backend.clipboard import Delivery
    from backend.cluster.ops import ClusterStatus
    from backend.doctor import Check
    from backend.fixes import Proposal
    from backend.gpu_facts import GpuSample
    from backend.history import Window
    from backend.host import HostSample
    from backend.ledger.preview import Preview
    from backend.profiles import Verdict
    from backend.server.orphans import Holder, OrphanScan, Stopped
    from backend.setting_rows import Saved
    from backend.settings import Settings


class ServerPolled(Message):
    """A fresh look at the supervisor's state file and the new log lines."""

    def __init__(self, poll: Poll) -> None:
        super().__init__()
        self.poll = poll


class ActionFinished(Message):
    """start / stop / restart / sleep / wake finished; `text` says what was done."""

    def __init__(self, action: str, text: str, error: bool = False) -> None:
        super().__init__()
        self.action = action
        self.text = text
        self.error = error


class GpusSampled(Message):
    """One NVML reading of every card and who holds each card (GPU index -> holders)."""

    def __init__(self, samples: list[GpuSample], holders: dict[int, list[Holder]] | None = None) -> None:
        super().__init__()
        self.samples = samples
        self.holders = {} if holders is None else holders


class PlanReady(Message):
    """The memory ledger for the current settings (Ledger.to_dict()), or why there is none."""

    def __init__(self, plan: dict[str, Any] | None, error: str | None = None) -> None:
        super().__init__()
        self.plan = plan
        self.error = error


class SettingSaved(Message):
    """A settings edit was written (`saved`) or refused (`error`)."""

    def __init__(self, saved: Saved | None = None, error: str | None = None) -> None:
        super().__init__()
        self.saved = saved
        self.error = error


class OrphansScanned(Message):
    """Before a start or a restart (the old server still running): processes no supervisor owns."""

    def __init__(self, scan: OrphanScan, done: str = "", restart: bool = False) -> None:
        super().__init__()
        self.scan = scan
        self.done = done
        self.restart = restart


class OrphanKilled(Message):
    """A targeted kill finished: `stopped` (a Stopped, or a stopped supervisor's text) and a fresh
    scan, or `error`."""

    def __init__(self, pid: int, stopped: Stopped | str | None = None, scan: OrphanScan | None = None,
                 error: str | None = None) -> None:
        super().__init__()
        self.pid = pid
        self.stopped = stopped
        self.scan = scan
        self.error = error


class ChatDelta(Message):
    """Reply text that arrived (deltas coalesced for about 50 ms)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class ChatFinished(Message):
    """A reply ended: `result` with its figures, or `error` and `fix`. Bubbles up so the main
    screen can put the measured tokens/s beside the ledger's ceiling."""

    def __init__(self, result: ChatResult | None, line: str, error: str | None = None, fix: str | None = None,
                 cancelled: bool = False, conversation: Conversation | None = None) -> None:
        super().__init__()
        self.result = result
        self.line = line
        self.error = error
        self.fix = fix
        self.cancelled = cancelled
        self.conversation = conversation  # the conversation it belongs to


class DoctorReady(Message):
    """The pre-flight checks, or why they could not run."""

    def __init__(self, checks: list[Check], error: str | None = None) -> None:
        super().__init__()
        self.checks = checks
        self.error = error


class FixProposed(Message):
    """The shown failure's fix as data (backend.fixes.Proposal), or None when its fix is no settings change."""

    def __init__(self, key: tuple[Any, ...], proposal: Proposal | None) -> None:
        super().__init__()
        self.key = key
        self.proposal = proposal


class FixApplied(Message):
    """A fix saved into the config file (`settings` read again), or why it was not."""

    def __init__(self, proposal: Proposal, path: str | None, settings: Settings | None,
                 error: str | None = None) -> None:
        super().__init__()
        self.proposal = proposal
        self.path = path
        self.settings = settings
        self.error = error


class StacksDumped(Message):
    """`qwen-tui stacks` from the console (k): where the dump was saved and of how many processes, or why not."""

    def __init__(self, path: str | None, count: int = 0, error: str | None = None) -> None:
        super().__init__()
        self.path = path
        self.count = count
        self.error = error


class P2PReady(Message):
    """`doctor --p2p`'s report (backend.doctor.p2p.run_p2p), or why it could not run."""

    def __init__(self, report: dict[str, Any] | None, error: str | None = None) -> None:
        super().__init__()
        self.report = report
        self.error = error


class MetricsSampled(Message):
    """One read of the server's /metrics: `snapshot` (backend.metrics.Snapshot.to_dict()) and the
    rates since the last read, or `error`."""

    def __init__(self, snapshot: dict[str, Any] | None, rates: dict[str, Any], error: str | None = None) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.rates = rates
        self.error = error


class BenchProgress(Message):
    """A load-test request started or ended."""

    def __init__(self, done: int, in_flight: int, total: int) -> None:
        super().__init__()
        self.done = done
        self.in_flight = in_flight
        self.total = total


class BenchFinished(Message):
    """A load test ended: `report` is the `bench --json` object, or `error` why it did not run."""

    def __init__(self, report: dict[str, Any] | None, error: str | None = None) -> None:
        super().__init__()
        self.report = report
        self.error = error


class ReportReady(Message):
    """The triage report (backend/report.py) as Markdown, with what was redacted; or why it could not be built."""

    def __init__(self, text: str | None, redactions: str = "", error: str | None = None) -> None:
        super().__init__()
        self.text = text
        self.redactions = redactions
        self.error = error


class ChatRefused(Message):
    """A message was not sent: prompt + max_tokens would exceed max_model_len. `drop`: the fewest
    oldest exchanges to leave out so it fits (None: dropping cannot make it fit, or it could not
    be counted)."""

    def __init__(self, text: str, budget: Budget, drop: int | None) -> None:
        super().__init__()
        self.text = text
        self.budget = budget
        self.drop = drop


class BudgetCounted(Message):
    """The context budget line under the chat input."""

    def __init__(self, budget: Budget) -> None:
        super().__init__()
        self.budget = budget


class ClipboardDelivered(Message):
    """After OSC 52 went out: what the local clipboard or a file did."""

    def __init__(self, delivery: Delivery, what: str) -> None:
        super().__init__()
        self.delivery = delivery
        self.what = what


class ClusterPolled(Message):
    """One look at every box and the router (backend.cluster.ops.ClusterStatus), or why there is none."""

    def __init__(self, status: ClusterStatus | None, error: str | None = None) -> None:
        super().__init__()
        self.status, self.error = status, error


class ClusterStep(Message):
    """A line of progress from a drain / undrain / rolling restart; `done` on its last line."""

    def __init__(self, text: str, done: bool = False, error: bool = False) -> None:
        super().__init__()
        self.text, self.done, self.error = text, done, error


class LedgerPreviewed(Message):
    """The ledger for a value being typed in the settings editor (backend.ledger.preview.Preview)."""

    def __init__(self, preview: Preview, typed: str) -> None:
        super().__init__()
        self.preview, self.typed = preview, typed


class ProfilesPlanned(Message):
    """The ledger's verdict on every workload profile (backend.profiles.Verdict), or why not."""

    def __init__(self, verdicts: list[Verdict], error: str | None = None) -> None:
        super().__init__()
        self.verdicts, self.error = verdicts, error


class SweepEvent(Message):
    """A concurrency sweep moved: a backend.bench.sweep.LevelProgress, or a finished level's row (dict)."""

    def __init__(self, event: LevelProgress | dict[str, Any]) -> None:
        super().__init__()
        self.event = event


class SweepFinished(Message):
    """A sweep ended: `result` is the `bench --sweep --json` object (saved), or `error` why it did not run."""

    def __init__(self, result: dict[str, Any] | None, previous: dict[str, Any] | None = None,
                 error: str | None = None) -> None:
        super().__init__()
        self.result, self.previous, self.error = result, previous, error


class PullStarted(Message):
    """A `qwen-tui pull` process was started (its pid and log), or why not."""

    def __init__(self, pid: int | None, log: str | None, error: str | None = None) -> None:
        super().__init__()
        self.pid = pid
        self.log = log
        self.error = error


class PullPolled(Message):
    """The pull's state file (backend/pull/state.py), whether its process is that pull and alive, and
    why the file was not believed."""

    def __init__(self, state: dict[str, Any] | None, alive: bool, why: str | None = None) -> None:
        super().__init__()
        self.state = state
        self.alive = alive
        self.why = why


class HostSampled(Message):
    """One reading of the host's CPU, RAM, swap and the server's RSS (backend.host.HostSample)."""

    def __init__(self, sample: HostSample) -> None:
        super().__init__()
        self.sample = sample


class HistoryRead(Message):
    """The flight recorder's window (backend.history.Window) for the history view, or why not."""

    def __init__(self, window: Window | None, label: str, error: str | None = None) -> None:
        super().__init__()
        self.window = window
        self.label = label
        self.error = error
