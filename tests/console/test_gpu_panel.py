"""GPU panels in the console: a two-card box from the recorded H200 reading (FakeNvml), whose
compute processes are real processes titled like vLLM; the supervised server's are told apart
from the ones nobody owns."""

from __future__ import annotations

from backend.gpu import GpuMonitor
from backend.server import orphans
from backend.server.client import Poll
from backend.settings import load
from tests.helpers.console import ScriptedClient, wait_until
from tests.helpers.nvml_fake import FakeNvml
from tests.helpers.procs import VLLM_LIKE
from tui.app import make_app
from tui.widgets.gpu_panel import GpuPanel

GIB = 2**30


def _box(tp0: int, tp1: int, stray: int) -> GpuMonitor:
    return GpuMonitor(nvml=FakeNvml(copies=2, procs=[
        [{"pid": tp0, "usedGpuMemory": 21 * GIB}, {"pid": stray, "usedGpuMemory": 3 * GIB}],
        [{"pid": tp1, "usedGpuMemory": 21 * GIB}],
    ]))


def _own(supervisor, tree, api_pid: int) -> None:
    supervisor(pid=api_pid, pgid=tree.pgid)


def test_holders_by_gpu_marks_what_the_server_owns(spawn, qhome, fake_supervisor) -> None:
    server = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    stray = spawn({"role": "old", "title": "VLLM::EngineCore"})
    p = server.pids
    _own(fake_supervisor, server, p["api"])
    got = orphans.holders_by_gpu(_box(p["tp0"], p["tp1"], stray.pids["old"]))
    assert [(h.pid, h.owned) for h in got[0]] == [(p["tp0"], True), (stray.pids["old"], False)]
    assert got[0][0].label == "VLLM::Worker_TP"  # the kernel's 15-character comm
    assert got[1][0].label == "VLLM::Worker_TP1" and got[1][0].gpu_bytes == 21 * GIB
    assert orphans.holders_by_gpu(None) == {}


async def test_console_panels_show_each_card_and_flag_the_stray_process(spawn, qhome, fake_supervisor) -> None:
    server = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    stray = spawn({"role": "old", "title": "VLLM::EngineCore"})
    p = server.pids
    _own(fake_supervisor, server, p["api"])
    app = make_app(load(overrides=["console.gpu_interval_s=0.1"]),
                   ScriptedClient([Poll(state={"state": "ready"})]), _box(p["tp0"], p["tp1"], stray.pids["old"]))
    async with app.run_test(size=(160, 60)) as pilot:
        assert await wait_until(pilot, lambda: len(app.screen.query(GpuPanel)) == 2
                                and all(pn.last_rows for pn in app.screen.query(GpuPanel)))
        first, second = app.screen.query(GpuPanel)
        assert first.border_title == "GPU 0 · NVIDIA H200"
        rows0 = dict(first.last_rows[:5])
        assert rows0["PCIe"] == "Gen5/5 x16/16" and rows0["power"].endswith("/ 700 W")
        procs0 = [v for k, v in first.last_rows if k == "proc"]
        assert procs0[0].startswith(f"{p['tp0']} VLLM::Worker_TP 21.0 GiB") and "not ours" not in procs0[0]
        assert procs0[1].startswith(f"{stray.pids['old']} VLLM::EngineCor 3.0 GiB") and procs0[1].endswith("not ours")
        assert [v for k, v in second.last_rows if k == "proc"] == [f"{p['tp1']} VLLM::Worker_TP1 21.0 GiB"]
