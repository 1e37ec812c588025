"""Workers that raise are said where they are seen, by one handler in the app (QwenApp.show_worker_failure).

Textual posts ``Worker.StateChanged`` to the node that started the worker and does not bubble it
(``bubble=False`` in textual/worker.py), so every screen or widget that starts workers mixes this
in: an ERROR is handed on to the app, nothing else is."""

from __future__ import annotations

from textual.worker import Worker, WorkerState


class WorkerErrorsToApp:
    """Mixin for a Screen or Widget that starts workers (`self.app` is the QwenApp)."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR and self is not self.app:  # type: ignore[attr-defined]
            self.app.post_message(Worker.StateChanged(event.worker, event.state))  # type: ignore[attr-defined]
