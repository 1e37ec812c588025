"""Every message the console's workers post, in one place. Workers never touch widgets."""

from __future__ import annotations

from textual.message import Message

from backend.client import Poll


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
    """One NVML reading of every card (a list of backend.gpu.GpuSample)."""

    def __init__(self, samples: list) -> None:
        super().__init__()
        self.samples = samples


class PlanReady(Message):
    """The memory ledger for the current settings (Ledger.to_dict()), or why there is none."""

    def __init__(self, plan: dict | None, error: str | None = None) -> None:
        super().__init__()
        self.plan, self.error = plan, error
