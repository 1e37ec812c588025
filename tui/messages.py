"""Every message the console's workers post, in one place. Workers never touch widgets.

Each is a dataclass with typed fields (Textual's Message calls ``__post_init__``, so dataclass
messages initialise as the hand-written ones did). ``@dataclass(eq=False)`` is written out on each
(an alias of it hid the fields from mypy): a message is an event, equal only to itself (as Textual's
own are), and dataclass's ``__eq__`` for 19 classes cost ~5 ms of the console's start (issue 16).
The backend types are imported for the type checker only: the console's first frame must not wait
for NVML, httpx or the doctor."""

from __future__ import annotations

from dataclasses import dataclass, field
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
    from backend.gpu import GpuSample
    from backend.history import Window
    from backend.host import HostSample
    from backend.ledger.preview import Preview
    from backend.profiles import Verdict
    from backend.server.orphans import Holder, OrphanScan, Stopped
    from backend.setting_rows import Saved
    from backend.settings import Settings


@dataclass(eq=False)
class ServerPolled(Message):
    """A fresh look at the supervisor's state file and the new log lines."""

    poll: Poll


@dataclass(eq=False)
class ActionFinished(Message):
    """start / stop / restart / sleep / wake finished; `text` says what was done."""

    action: str
    text: str
    error: bool = False


@dataclass(eq=False)
class GpusSampled(Message):
    """One NVML reading of every card and who holds each card (GPU index -> holders)."""

    samples: list[GpuSample]
    holders: dict[int, list[Holder]] = field(default_factory=dict)


@dataclass(eq=False)
class PlanReady(Message):
    """The memory ledger for the current settings (Ledger.to_dict()), or why there is none."""

    plan: dict[str, Any] | None
    error: str | None = None


@dataclass(eq=False)
class SettingSaved(Message):
    """A settings edit was written (`saved`) or refused (`error`)."""

    saved: Saved | None = None
    error: str | None = None


@dataclass(eq=False)
class OrphansScanned(Message):
    """Before a start or a restart (the old server still running): processes no supervisor owns."""

    scan: OrphanScan
    done: str = ""
    restart: bool = False


@dataclass(eq=False)
class OrphanKilled(Message):
    """A targeted kill finished: `stopped` (a Stopped, or a stopped supervisor's text) and a fresh
    scan, or `error`."""

    pid: int
    stopped: Stopped | str | None = None
    scan: OrphanScan | None = None
    error: str | None = None


@dataclass(eq=False)
class ChatDelta(Message):
    """Reply text that arrived (deltas coalesced for about 50 ms)."""

    text: str


@dataclass(eq=False)
class ChatFinished(Message):
    """A reply ended: `result` with its figures, or `error` and `fix`. Bubbles up so the main
    screen can put the measured tokens/s beside the ledger's ceiling."""

    result: ChatResult | None
    line: str
    error: str | None = None
    fix: str | None = None
    cancelled: bool = False
    conversation: Conversation | None = None  # the conversation it belongs to


@dataclass(eq=False)
class DoctorReady(Message):
    """The pre-flight checks, or why they could not run."""

    checks: list[Check]
    error: str | None = None


@dataclass(eq=False)
class FixProposed(Message):
    """The shown failure's fix as data (backend.fixes.Proposal), or None when its fix is no settings change."""

    key: tuple[Any, ...]
    proposal: Proposal | None


@dataclass(eq=False)
class FixApplied(Message):
    """A fix saved into the config file (`settings` read again), or why it was not."""

    proposal: Proposal
    path: str | None
    settings: Settings | None
    error: str | None = None


@dataclass(eq=False)
class StacksDumped(Message):
    """`qwen-tui stacks` from the console (k): where the dump was saved and of how many processes, or why not."""

    path: str | None
    count: int = 0
    error: str | None = None


@dataclass(eq=False)
class P2PReady(Message):
    """`doctor --p2p`'s report (backend.doctor.p2p.run_p2p), or why it could not run."""

    report: dict[str, Any] | None
    error: str | None = None


@dataclass(eq=False)
class MetricsSampled(Message):
    """One read of the server's /metrics: `snapshot` (backend.metrics.Snapshot.to_dict()) and the
    rates since the last read, or `error`."""

    snapshot: dict[str, Any] | None
    rates: dict[str, Any]
    error: str | None = None


@dataclass(eq=False)
class BenchProgress(Message):
    """A load-test request started or ended."""

    done: int
    in_flight: int
    total: int


@dataclass(eq=False)
class BenchFinished(Message):
    """A load test ended: `report` is the `bench --json` object, or `error` why it did not run."""

    report: dict[str, Any] | None
    error: str | None = None


@dataclass(eq=False)
class ReportReady(Message):
    """The triage report (backend/report.py) as Markdown, with what was redacted; or why it could not be built."""

    text: str | None
    redactions: str = ""
    error: str | None = None


@dataclass(eq=False)
class ChatRefused(Message):
    """A message was not sent: prompt + max_tokens would exceed max_model_len. `drop`: the fewest
    oldest exchanges to leave out so it fits (None: dropping cannot make it fit, or it could not
    be counted)."""

    text: str
    budget: Budget
    drop: int | None


@dataclass(eq=False)
class BudgetCounted(Message):
    """The context budget line under the chat input."""

    budget: Budget


@dataclass(eq=False)
class ClipboardDelivered(Message):
    """After OSC 52 went out: what the local clipboard or a file did."""

    delivery: Delivery
    what: str


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


@dataclass(eq=False)
class PullStarted(Message):
    """A `qwen-tui pull` process was started (its pid and log), or why not."""

    pid: int | None
    log: str | None
    error: str | None = None


@dataclass(eq=False)
class PullPolled(Message):
    """The pull's state file (backend/pull/state.py), whether its process is that pull and alive, and
    why the file was not believed."""

    state: dict[str, Any] | None
    alive: bool
    why: str | None = None


@dataclass(eq=False)
class HostSampled(Message):
    """One reading of the host's CPU, RAM, swap and the server's RSS (backend.host.HostSample)."""

    sample: HostSample


@dataclass(eq=False)
class HistoryRead(Message):
    """The flight recorder's window (backend.history.Window) for the history view, or why not."""

    window: Window | None
    label: str
    error: str | None = None
