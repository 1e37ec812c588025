"""A worker that raises is named on screen (one Worker.StateChanged handler in the app), not left
to freeze its panel in silence. Asserted on the messages the app posted (run_test's message_hook)."""

from __future__ import annotations

from textual.worker import Worker, WorkerState

from backend.settings import load
from backend.supervisor_client import Poll
from tests.helpers.console import NoNvml, ScriptedClient, wait_until
from tui.app import make_app


class BrokenGpus(NoNvml):
    """NVML that initialised, then fails on the first sample (a GPU fell off the bus)."""

    reason = None

    def available(self) -> bool:
        return True

    def sample(self):
        raise RuntimeError("NVML: GPU is lost")


async def test_the_gpu_sampler_raising_says_which_worker_failed(qhome):
    app = make_app(load(overrides=["console.on_exit=ask"]), ScriptedClient([Poll(state={"state": "stopped"})]),
                   BrokenGpus())
    seen = []
    async with app.run_test(size=(140, 40), message_hook=seen.append) as pilot:
        assert await wait_until(pilot, lambda: app.worker_failures)
        failed = [m for m in seen if isinstance(m, Worker.StateChanged) and m.state is WorkerState.ERROR]
        assert {m.worker.group for m in failed} == {"gpus"}  # posted to the screen, handed on to the app
        assert [f[:2] for f in app.worker_failures] == [("sample_gpus", "gpus")]  # said once
        shown = [n.message for n in app._notifications]
        assert any("the GPU sampler (sample_gpus) stopped: RuntimeError: NVML: GPU is lost" in m for m in shown), shown
        assert app.is_running  # the console goes on: the other workers still poll
        assert app.screen.state.state == "stopped"
