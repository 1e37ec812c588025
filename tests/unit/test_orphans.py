"""backend.server.orphans: finding processes no supervisor owns, killing only the pids picked, and checking
that a stop released the GPU memory. Real processes (titled like vLLM); NVML is a small double
whose process list follows the real processes: a pid is listed while it is alive."""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from backend.server import orphans, statefile
from tests.helpers.console import NoNvml
from tests.helpers.procs import VLLM_LIKE, alive

GIB = 2**30


class GpuDouble:
    """GpuMonitor's public surface. ``per_gpu``: index -> {pid: bytes}; a dead pid drops out of
    the list unless ``sticky`` (a driver that has not freed the memory yet)."""

    def __init__(self, per_gpu: dict[int, dict[int, int | None]], sticky: bool = False,
                 base_used: int = GIB) -> None:
        self.per_gpu, self.sticky, self.base_used = per_gpu, sticky, base_used
        self.reason = None
        self.shut = False

    def available(self) -> bool:
        return True

    def processes_by_gpu(self) -> dict[int, dict[int, int | None]]:
        return {i: {p: b for p, b in d.items() if self.sticky or alive(p)} for i, d in self.per_gpu.items()}

    def processes(self, indices=None) -> dict[int, int | None]:
        out: dict[int, int | None] = {}
        for i, d in self.processes_by_gpu().items():
            if indices is not None and i not in indices:
                continue
            for p, b in d.items():
                out[p] = (out.get(p) or 0) + (b or 0)
        return out

    def sample(self):
        return [SimpleNamespace(memory_used_bytes=self.base_used + sum(b or 0 for b in d.values()))
                for d in self.processes_by_gpu().values()]

    def shutdown(self) -> None:
        self.shut = True


@pytest.mark.parametrize("value, expected", [
    (None, None), ("0,1", [0, 1]), (" 1 ", [1]), ("GPU-8a2c1f", None), ("", []),
])
def test_configured_gpus(value, expected, monkeypatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert orphans.configured_gpus(env) == expected


def test_configured_gpus_falls_back_to_this_environment(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert orphans.configured_gpus({}) == [1]
    assert orphans.configured_gpus({"CUDA_VISIBLE_DEVICES": "0"}) == [0]  # the server's own wins


def test_scan_finds_vllm_titles_and_gpu_holders_on_our_gpus_only(spawn, qhome) -> None:
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    p = tree.pids
    mon = GpuDouble({0: {p["tp0"]: 10 * GIB, p["helper"]: 2 * GIB}, 1: {p["tp1"]: 10 * GIB}})
    found = orphans.scan({"CUDA_VISIBLE_DEVICES": "0"}, monitor=mon)
    ours = {i.pid: i for i in found.processes if i.pid in p.values()}
    # every vLLM-titled process, plus the non-vLLM helper because it holds memory on GPU 0
    assert set(ours) == {p["api"], p["engine"], p["tp0"], p["tp1"], p["helper"]}
    assert ours[p["tp0"]].gpu_bytes == 10 * GIB
    assert ours[p["helper"]].gpu_bytes == 2 * GIB
    assert ours[p["tp1"]].gpu_bytes is None  # GPU 1 is not configured: its memory is not ours to count
    assert found.gpu_indices == [0] and found.nvml is None
    assert not mon.shut  # a monitor passed in is the caller's to close
    text = found.describe()
    assert f"pid {p['tp0']} worker" in text and "GPU 10.0 GiB" in text


def test_scan_without_nvml_still_lists_vllm_processes(spawn, qhome) -> None:
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    found = orphans.scan({}, monitor=NoNvml())
    assert tree.pids["engine"] in found.pids and tree.pids["helper"] not in found.pids
    assert "no NVIDIA driver" in found.nvml


def test_scan_leaves_out_the_supervised_server(spawn, qhome, fake_supervisor) -> None:
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    p = tree.pids
    fake_supervisor(pid=p["api"], pgid=tree.pgid)  # a live supervisor owns the tree
    mon = GpuDouble({0: {p["tp0"]: GIB}})
    found = orphans.scan({}, monitor=mon)
    assert not set(found.pids) & set(p.values())
    statefile.write({"state": "stopped"})  # a finished supervisor owns nothing
    assert p["engine"] in orphans.scan({}, monitor=mon).pids


def test_kill_only_the_chosen_pid_and_verify_its_gpu_memory_is_released(spawn, qhome) -> None:
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    p = tree.pids
    mon = GpuDouble({0: {p["tp0"]: 10 * GIB}, 1: {p["tp1"]: 10 * GIB}})
    found = orphans.scan({}, monitor=mon)
    done = orphans.kill([p["tp0"]], found, monitor=mon)
    assert done.ok and done.stop.terminated == [p["tp0"]]
    assert not alive(p["tp0"])
    assert all(alive(p[r]) for r in ("api", "engine", "tp1", "helper"))  # nothing else touched
    assert done.release.held_before == {p["tp0"]: 10 * GIB} and done.release.still_held == {}
    assert done.release.used_before == 22 * GIB and done.release.used_after == 12 * GIB  # + 1 GiB base each
    assert "GPU memory released: 10.0 GiB of 1 process" in done.summary()
    # tp0 is now a zombie (its parent does not reap it): exited, holding nothing, not an orphan
    assert p["tp0"] not in orphans.scan({}, monitor=mon).pids


def test_kill_refuses_pids_that_were_not_found_or_were_reused(spawn, qhome) -> None:
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    p = tree.pids
    found = orphans.scan({}, monitor=NoNvml())
    with pytest.raises(ValueError, match="not one of the processes found"):
        orphans.kill([p["helper"]], found)  # alive, but not a vLLM process: never killed
    info = found.find(p["engine"])
    # the scan saw another process under this pid (it started 100 s earlier): the pid was reused
    moved = orphans.OrphanScan([replace(info, create_time=info.create_time - 100)], None, None)
    with pytest.raises(ValueError, match="another program"):
        orphans.kill([p["engine"]], moved)
    assert alive(p["helper"]) and alive(p["engine"])


def test_memory_not_released_is_reported(spawn, qhome) -> None:
    tree = spawn({"role": "solo", "title": "VLLM::EngineCore"})
    pid = tree.pids["solo"]
    mon = GpuDouble({0: {pid: 3 * GIB}}, sticky=True)  # the driver still lists the dead pid
    found = orphans.scan({}, monitor=mon)
    t0 = time.monotonic()
    done = orphans.stop_verified(None, [pid], 5.0, mon, release_timeout=0.5)
    assert done.stop.ok and not done.ok
    assert time.monotonic() - t0 < 5
    assert done.release.still_held == {pid: 3 * GIB}
    assert "GPU memory NOT released after" in done.summary() and f"pid {pid} 3.0 GiB" in done.summary()
    assert found.gpu_bytes == 3 * GIB


def test_release_wording_without_nvml_or_without_holders() -> None:
    r = orphans.wait_released(NoNvml(), {})
    assert not r.checked and "not checked" in r.summary() and "no NVIDIA driver" in r.summary()
    r = orphans.wait_released(GpuDouble({0: {}}), {})
    assert r.checked and r.ok and r.summary().startswith("no GPU memory was held")
    stopped = orphans.Stopped(orphans.StopReport(1.25, [1], [], []), orphans.wait_released(None, {}))
    assert stopped.summary() == "stopped in 1.2 s"  # no monitor asked for (CPU server): not mentioned
    assert orphans.wait_released(None, {}).to_dict()["checked"] is False


def _cli(*args: str):
    import json
    import os
    import subprocess
    import sys

    from tests.helpers import ROOT

    r = subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, env=os.environ.copy())
    return r, (json.loads(r.stdout) if r.stdout.strip().startswith("{") else None)


def test_cli_lists_then_kills_exactly_the_pid_asked_for(spawn, qhome) -> None:
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    p = tree.pids
    r, out = _cli("stop", "--orphans", "--list", "--json")
    assert r.returncode == 0, r.stderr
    listed = {d["pid"]: d for d in out["orphans"]["processes"]}
    assert {p["api"], p["engine"], p["tp0"], p["tp1"]} <= set(listed) and out["killed"] == []
    assert listed[p["engine"]]["role"] == "engine_core"
    assert all(alive(pid) for pid in p.values())  # --list kills nothing
    r, out = _cli("stop", "--orphans", "--pid", str(p["helper"]), "--json")
    assert r.returncode == 1 and "not one of the processes found" in r.stderr and alive(p["helper"])
    r, out = _cli("stop", "--orphans", "--pid", str(p["tp1"]), "--json")
    assert r.returncode == 0, r.stderr
    assert out["ok"] and out["killed"] == [p["tp1"]] and out["summary"].startswith("stopped in")
    assert not alive(p["tp1"]) and alive(p["tp0"]) and alive(p["engine"])


def test_a_dead_supervisors_tp2_workers_are_both_found(spawn, qhome) -> None:
    """kill -9 of the supervisor: its state file still says ready and names the group, but a dead
    supervisor owns nothing, so the scan lists the API server, the engine and both workers."""
    import subprocess
    import sys

    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    p = tree.pids
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    statefile.write({"state": "ready", "supervisor_pid": gone.pid, "supervisor_create_time": 1.0,
                     "supervisor_cmdline": "x", "pid": p["api"], "pgid": tree.pgid})
    found = orphans.scan({}, monitor=NoNvml())
    assert {p["api"], p["engine"], p["tp0"], p["tp1"]} <= set(found.pids)
    roles = {i.pid: i.role for i in found.processes}
    assert roles[p["tp0"]] == roles[p["tp1"]] == "worker"
    assert "VLLM::Worker_TP1" in found.describe()
