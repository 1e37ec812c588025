"""backend.gpu against a fake NVML answering from a real H200 reading, plus the real probe's output."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backend import gpu
from backend.gpu import GpuMonitor
from tests.helpers import ROOT
from tests.helpers.nvml_fake import FIXTURES, GPU_IS_LOST, LIBRARY_NOT_FOUND, FakeNvml, load_snapshot

H200_TOTAL = 150_754_820_096
H200_RESERVED = 644_939_776


@pytest.fixture
def fake() -> FakeNvml:
    return FakeNvml()


def test_static_facts_from_h200_snapshot(fake: FakeNvml) -> None:
    mon = GpuMonitor(nvml=fake)
    assert mon.available(), mon.reason
    assert mon.reason is None
    assert mon.driver_version == "580.159.04"
    assert mon.nvml_version == "13.580.159.04"
    assert mon.cuda_driver_version == 13000
    (info,) = mon.gpus
    assert info.index == 0
    assert info.name == "NVIDIA H200"
    assert info.uuid == "GPU-eada4807-2ab2-1f43-b19b-ef0b073c9efe"
    assert info.memory_total_bytes == H200_TOTAL
    assert info.compute_capability == (9, 0)
    assert info.power_limit_w == 700.0
    assert info.pcie_gen_max == 5
    assert info.pcie_gen_gpu_max is None  # not recorded: Not Supported
    assert info.pcie_width_max == 16
    assert info.memory_bus_width_bits == 6016
    assert info.max_mem_clock_mhz == 3201
    # 6016 bit x 3201 MHz x 2 / 8 = 4814.3 GB/s (H200 datasheet: 4.8 TB/s)
    assert info.memory_bandwidth_gbs == pytest.approx(4814.3, abs=0.1)
    assert info.persistence_mode is True
    assert info.nvlink_supported is False  # nvlink0 was Not Supported
    assert info.nvlink_active_links == 0
    assert mon.p2p == ()  # one GPU: no pairs
    assert fake.calls["nvmlDeviceGetP2PStatus"] == 0


def test_sample_values_match_the_recording(fake: FakeNvml) -> None:
    mon = GpuMonitor(nvml=fake)
    (s,) = mon.sample()
    assert s.index == 0 and s.name == "NVIDIA H200"
    assert s.memory_source == "v2"
    assert s.memory_used_bytes == 0  # v2: matches nvidia-smi's 0 MiB, not v1's 615 MiB
    assert s.memory_total_bytes == H200_TOTAL
    assert s.memory_reserved_bytes == H200_RESERVED
    assert s.memory_free_bytes == 150_109_880_320
    assert s.memory_used_fraction == 0.0
    assert s.utilization_gpu_pct == 0
    assert s.utilization_memory_pct == 0
    assert s.temperature_c == 37
    assert s.power_w == pytest.approx(94.652)
    assert s.power_limit_w == 700.0
    assert (s.pcie_gen, s.pcie_gen_max, s.pcie_width, s.pcie_width_max) == (5, 5, 16, 16)
    assert s.fan_pct is None  # Not Supported on a passively cooled card: a value, not an error
    assert s.errors == ()
    assert s.to_dict()["fan_pct"] is None
    assert "gpu0.fan" in mon.unsupported
    with pytest.raises(AttributeError):
        s.power_w = 1.0  # type: ignore[misc]  # frozen


def test_init_once_unsupported_not_reasked_no_pcie_throughput(fake: FakeNvml) -> None:
    mon = GpuMonitor(nvml=fake)
    for _ in range(5):
        mon.sample()
        mon.processes()
    assert fake.calls["nvmlInit"] == 1
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == 1
    assert fake.calls["nvmlDeviceGetFanSpeed"] == 1  # Not Supported once, never asked again
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 5
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 1  # v1 once at start-up, for the total
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0
    assert fake.calls["nvmlDeviceGetCudaComputeCapability"] == 1
    assert fake.calls["nvmlDeviceGetTemperature"] == 0  # the deprecated call is not used
    mon.shutdown()
    mon.shutdown()
    assert fake.calls["nvmlShutdown"] == 1
    assert not mon.available()
    assert mon.sample() == [] and mon.processes() == {}


def test_memory_v1_fallback_on_old_driver() -> None:
    fake = FakeNvml(no_memory_v2=True)
    mon = GpuMonitor(nvml=fake)
    s1, = mon.sample()
    s2, = mon.sample()
    assert s1.memory_source == "v1"
    assert s1.memory_used_bytes == H200_RESERVED  # v1 counts the reservation as used
    assert s1.memory_reserved_bytes is None
    assert s2.memory_used_bytes == H200_RESERVED
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 1  # not retried


def test_processes_sum_over_gpus_and_none_safe() -> None:
    gib = 1 << 30
    fake = FakeNvml(
        copies=2,
        procs=[
            [{"pid": 4242, "usedGpuMemory": 20 * gib}, {"pid": 77, "usedGpuMemory": None}],
            [{"pid": 4243, "usedGpuMemory": 20 * gib}, {"pid": 4242, "usedGpuMemory": 512}],
        ],
    )
    mon = GpuMonitor(nvml=fake)
    assert mon.processes() == {4242: 20 * gib + 512, 77: None, 4243: 20 * gib}
    assert mon.processes_by_gpu() == {0: {4242: 20 * gib, 77: None}, 1: {4243: 20 * gib, 4242: 512}}
    assert GpuMonitor(nvml=FakeNvml()).processes() == {}  # the idle H200: no processes


def test_processes_v2_fallback_on_library_mismatch() -> None:
    fake = FakeNvml(no_procs_v3=True, procs=[[{"pid": 10, "usedGpuMemory": 1000}]])
    mon = GpuMonitor(nvml=fake)
    assert mon.processes() == {10: 1000}
    assert mon.processes() == {10: 1000}
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 1
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 2


def test_other_nvml_errors_are_reported_per_field_and_retried() -> None:
    fake = FakeNvml(errors={"nvmlDeviceGetPowerUsage": GPU_IS_LOST})
    mon = GpuMonitor(nvml=fake)
    (s,) = mon.sample()
    assert s.power_w is None
    assert s.memory_used_bytes == 0  # the rest still reads
    assert len(s.errors) == 1 and s.errors[0].startswith("power: ")
    mon.sample()
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 2  # not "unsupported": asked again


def test_no_driver_is_a_reason_not_an_exception() -> None:
    fake = FakeNvml(init_error=LIBRARY_NOT_FOUND)
    mon = GpuMonitor(nvml=fake)
    assert not mon.available()
    assert "libnvidia-ml.so.1" in (mon.reason or "")
    assert mon.sample() == [] and mon.processes() == {} and mon.gpus == ()
    assert fake.calls["nvmlShutdown"] == 0  # init never succeeded


def test_missing_nvidia_ml_py(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_module() -> None:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(gpu, "_load_pynvml", no_module)
    mon = GpuMonitor()
    assert not mon.available()
    assert "nvidia-ml-py" in (mon.reason or "")


def test_real_pynvml_never_raises() -> None:
    mon = GpuMonitor()  # whatever this machine has: a GPU, no driver, or no nvidia-ml-py
    try:
        assert mon.available() or mon.reason
        assert isinstance(mon.sample(), list)
    finally:
        mon.shutdown()


def test_indices_select_and_reject() -> None:
    fake = FakeNvml(copies=2)
    mon = GpuMonitor(indices=[1], nvml=fake)
    assert [s.index for s in mon.sample()] == [1]
    bad = GpuMonitor(indices=[0, 5], nvml=FakeNvml(copies=2))
    assert not bad.available()
    assert "[5]" in (bad.reason or "")


def test_p2p_matrix_for_two_pcie_cards() -> None:
    # What two consumer cards without NVLink on a desktop board tend to report.
    fake = FakeNvml(copies=2, p2p={"read": 1, "write": 1, "nvlink": 5, "atomics": 1, "pci": 1}, topology=30)
    mon = GpuMonitor(nvml=fake)
    (link,) = mon.p2p
    assert (link.gpu_a, link.gpu_b) == (0, 1)
    assert link.read == link.write == "chipset not supported"
    assert link.nvlink == "not supported"
    assert link.topology == "PCIe host bridge (PHB)"
    assert link.ok is False
    ok = GpuMonitor(nvml=FakeNvml(copies=2, p2p={"read": 0, "write": 0}))
    assert ok.p2p[0].ok and ok.p2p[0].pci is None and ok.p2p[0].topology is None
    info = json.loads(json.dumps(ok.info_dict()))
    assert info["p2p"][0]["ok"] is True and len(info["gpus"]) == 2


def test_backend_modules_do_not_import_textual() -> None:
    code = "import sys, backend.gpu, backend.server.procs; sys.exit('textual' in sys.modules)"
    root = ROOT
    assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0


def test_recorded_probe_from_real_h200() -> None:
    """benchmarks/nvml_probe.py's output from the real H200 (tests/fixtures/nvml/h200-gpumonitor.json)."""
    probe = json.loads((FIXTURES / "h200-gpumonitor.json").read_text())
    snap = load_snapshot()
    assert probe["info"]["available"] is True
    (info,) = probe["info"]["gpus"]
    assert info["name"] == "NVIDIA H200"
    assert info["memory_total_bytes"] == snap["gpus"][0]["mem_v2"]["total"] == H200_TOTAL
    assert info["compute_capability"] == [9, 0]
    assert info["memory_bandwidth_gbs"] > 4000
    (s,) = probe["samples"]
    assert s["memory_source"] == "v2"
    assert s["memory_total_bytes"] == H200_TOTAL
    assert 0 <= s["memory_used_bytes"] < H200_TOTAL
    assert s["fan_pct"] is None
    assert 20 <= s["temperature_c"] <= 95
    assert 30 <= s["power_w"] <= s["power_limit_w"] == 700
    assert "gpu0.fan" in probe["unsupported"]
    timing = probe["timing_ms"]["sample"]
    assert timing["n"] == 100
    assert 0 < timing["median"] < 50


def test_processes_of_chosen_gpus_only() -> None:
    gib = 1 << 30
    fake = FakeNvml(copies=2, procs=[[{"pid": 1, "usedGpuMemory": gib}, {"pid": 2, "usedGpuMemory": None}],
                                     [{"pid": 1, "usedGpuMemory": 2 * gib}, {"pid": 3, "usedGpuMemory": gib}]])
    mon = GpuMonitor(nvml=fake)
    assert mon.processes([1]) == {1: 2 * gib, 3: gib}
    assert mon.processes([0]) == {1: gib, 2: None}
    assert mon.processes() == {1: 3 * gib, 2: None, 3: gib}


def test_an_unopened_monitor_opens_on_first_use_once(fake: FakeNvml) -> None:
    """start=False (the console's monitor, issue 16): no NVML until first used; then opened once,
    by the first thread, while the others wait for it (never a half-open monitor)."""
    import threading
    import time

    slow_init = fake.nvmlInit

    def init() -> None:
        time.sleep(0.2)  # NVML's start on a big box
        slow_init()

    fake.nvmlInit = init
    mon = GpuMonitor(nvml=fake, start=False)
    assert fake.calls["nvmlInit"] == 0
    seen: list[bool] = []
    threads = [threading.Thread(target=lambda: seen.append(mon.available())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [True, True, True] and fake.calls["nvmlInit"] == 1
    assert mon.gpus and mon.sample()[0].name == mon.gpus[0].name
    mon.shutdown()
    assert fake.calls["nvmlShutdown"] == 1 and not mon.available()


def test_an_unopened_monitor_shut_down_never_opens(fake: FakeNvml) -> None:
    mon = GpuMonitor(nvml=fake, start=False)
    mon.shutdown()
    assert not mon.available() and mon.reason == "NVML was shut down" and mon.sample() == []
    assert fake.calls["nvmlInit"] == 0 and fake.calls["nvmlShutdown"] == 0


def test_an_unopened_monitor_says_why_it_failed(fake: FakeNvml) -> None:
    fake.init_error = LIBRARY_NOT_FOUND
    mon = GpuMonitor(nvml=fake, start=False)
    assert not mon.available() and "libnvidia-ml.so.1 not found" in (mon.reason or "")


def test_a_monitor_shut_down_while_it_opens_releases_nvml(fake: FakeNvml) -> None:
    """The console quit while NVML was still opening in its thread: the opener closes it when done."""
    import threading
    import time

    started, slow_init = threading.Event(), fake.nvmlInit

    def init() -> None:
        started.set()
        time.sleep(0.2)
        slow_init()

    fake.nvmlInit = init
    mon = GpuMonitor(nvml=fake, start=False)
    opener = threading.Thread(target=mon.start)
    opener.start()
    assert started.wait(5)
    mon.shutdown()  # does not wait for the opener
    opener.join()
    assert fake.calls["nvmlInit"] == 1 and fake.calls["nvmlShutdown"] == 1 and not mon.available()


def test_recorded_console_on_the_h200_opened_nvml_itself_after_its_first_frame() -> None:
    """benchmarks/console_gpu_probe.py on the real H200 (session 6) with the monitor made unopened, as the
    console makes it: the console's own thread opened NVML and its GPU panel filled in."""
    rec = json.loads((FIXTURES / "h200-console-panels-opened-after-first-frame.json").read_text())
    assert rec["nvml_opened_by_console"] is True and 0 < rec["first_panel_s"] < 2
    (panel,) = rec["panels"]
    rows = dict(panel["rows"])
    assert panel["title"] == "GPU 0 · NVIDIA H200"
    assert rows["memory"].endswith("/ 140.4 GiB") and rows["PCIe"] == "Gen5/5 x16/16"
    assert rows["proc"].endswith("not ours")  # the probe's own 4 GiB holder, not a vLLM process
    (s,) = rec["samples"]
    assert s["memory_total_bytes"] == H200_TOTAL
