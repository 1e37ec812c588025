"""What NVML says about the GPUs, as typed values: the static facts read once (GpuInfo, P2PStatus)
and one reading of one GPU (GpuSample). backend.gpu.GpuMonitor makes them.

Apart from the monitor on purpose: the console makes its monitor before its first frame and opens
NVML after it, and these three frozen dataclasses cost ~2 ms to make (issue 28)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class GpuInfo:
    """Facts that do not change while the server runs; read once at start-up."""

    index: int
    name: str
    uuid: str | None
    memory_total_bytes: int | None
    compute_capability: tuple[int, int] | None
    power_limit_w: float | None
    pcie_gen_max: int | None  # what this GPU can do in this slot (device and system max)
    pcie_gen_gpu_max: int | None  # what the GPU itself can do
    pcie_width_max: int | None
    memory_bus_width_bits: int | None
    max_mem_clock_mhz: int | None
    memory_bandwidth_gbs: float | None  # theoretical: bus width x max memory clock x 2 (DDR)
    persistence_mode: bool | None
    nvlink_supported: bool
    nvlink_active_links: int


@dataclass(frozen=True)
class P2PStatus:
    """Peer-to-peer capability between two GPUs, as NVML reports it (``nvidia-smi topo -p2p rwnap``)."""

    gpu_a: int
    gpu_b: int
    read: str | None
    write: str | None
    nvlink: str | None
    atomics: str | None
    pci: str | None
    topology: str | None  # nearest common ancestor (``nvidia-smi topo -m``)

    @property
    def ok(self) -> bool:
        """True when the GPUs can read and write each other's memory directly."""
        return self.read == "OK" and self.write == "OK"


@dataclass(frozen=True)
class GpuSample:
    """One reading of one GPU. ``None`` means N/A (not supported, or the read failed: see ``errors``)."""

    index: int
    name: str
    timestamp: float  # time.time()
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    memory_reserved_bytes: int | None  # driver reservation; only memory v2 reports it
    memory_source: str  # "v2" (matches nvidia-smi) or "v1" (used includes the reservation)
    utilization_gpu_pct: int | None
    utilization_memory_pct: int | None  # % of time memory was busy, not capacity
    temperature_c: int | None
    power_w: float | None
    power_limit_w: float | None
    pcie_gen: int | None
    pcie_gen_max: int | None
    pcie_width: int | None
    pcie_width_max: int | None
    fan_pct: int | None
    errors: tuple[str, ...] = ()  # NVML failures other than "Not Supported", "field: message"

    @property
    def memory_free_bytes(self) -> int | None:
        if self.memory_used_bytes is None or self.memory_total_bytes is None:
            return None
        return self.memory_total_bytes - self.memory_used_bytes - (self.memory_reserved_bytes or 0)

    @property
    def memory_used_fraction(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
