"""Workers that raise are said where they are seen, by one handler in the app (QwenApp.show_worker_failure).

Every worker of the app, of a screen or of a widget is created by the app's one WorkerManager
(`DOMNode.workers` is `self.app.workers`; `run_worker` and `@work` go through it). So the hand-off
lives there, not in each class: `Worker.StateChanged` does not bubble (``bubble=False`` in
textual/worker.py), it reaches only the node that started the worker, and a mixin each screen must
remember was forgotten by seven of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.worker import Worker, WorkerState
from textual.worker_manager import WorkerManager


class ReportingWorkerManager(WorkerManager):
    """The app's worker manager: a worker that ended in ERROR is handed to `on_error` once.

    `_remove_worker` is the done callback Textual gives every worker it starts (add_worker and
    start_all, textual 8.x); tests/console/test_worker_failures.py fails if that stops being so."""

    def __init__(self, app: App[Any], on_error: Callable[[Worker[Any]], None]) -> None:
        super().__init__(app)
        self._on_error = on_error

    def _remove_worker(self, worker: Worker[Any]) -> None:
        super()._remove_worker(worker)
        if worker.state is WorkerState.ERROR:
            self._on_error(worker)


def install(app: App[Any], on_error: Callable[[Worker[Any]], None]) -> None:
    """Give `app` the reporting manager; before it runs (no worker exists yet)."""
    app._workers = ReportingWorkerManager(app, on_error)


class WorkerErrorsToApp:
    """The mixin this module used to hold: empty now (the manager above reports every worker), kept so
    that a screen written against it still imports; leave it out of new classes."""
