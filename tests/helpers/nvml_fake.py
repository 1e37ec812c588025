"""A fake ``pynvml`` built from a recorded NVML snapshot (tests/fixtures/nvml/h200-snapshot.json).

Functions return the recorded values. A field recorded as ``"NVMLError: Not Supported"``, or not
recorded at all, raises the matching NVML error, as the real library would. Errors are pynvml's own
classes when nvidia-ml-py is importable, so ``except pynvml.NVMLError_NotSupported`` works on them.
Every call is counted in ``calls`` so tests can check what was asked and how often.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvml"
SNAPSHOT = FIXTURES / "h200-snapshot.json"

NOT_SUPPORTED = 3
FUNCTION_NOT_FOUND = 13
LIBRARY_NOT_FOUND = 12
GPU_IS_LOST = 15

try:
    import pynvml as _pynvml

    NVMLError = _pynvml.NVMLError
    NVMLLibraryMismatchError = _pynvml.NVMLLibraryMismatchError
    _CODES = {text: code for code, text in NVMLError._errcode_to_string.items()}
except ImportError:  # keep the fake usable without nvidia-ml-py

    class NVMLError(Exception):  # type: ignore[no-redef]
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return {3: "Not Supported", 12: "NVML Shared Library Not Found"}.get(self.value, f"code {self.value}")

    class NVMLLibraryMismatchError(Exception):  # type: ignore[no-redef]
        pass

    _CODES = {"Not Supported": NOT_SUPPORTED, "Function Not Found": FUNCTION_NOT_FOUND}


def load_snapshot(path: Path = SNAPSHOT) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


class FakeNvml:
    """Enough of pynvml for backend.gpu.GpuMonitor, answering from a snapshot."""

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError

    def __init__(
        self,
        snapshot: dict[str, Any] | None = None,
        *,
        copies: int = 1,
        p2p: dict[str, int] | None = None,
        topology: int | None = None,
        procs: list[list[dict[str, Any]]] | None = None,
        init_error: int | None = None,
        no_memory_v2: bool = False,
        no_procs_v3: bool = False,
        errors: dict[str, int] | None = None,
    ) -> None:
        """``copies`` clones the recorded GPU to make a multi-GPU box; ``p2p`` maps a cap name
        ("read", "write", "nvlink", "atomics", "pci") to a P2P status code; ``errors`` makes a
        sample function (by its pynvml name) raise that NVML error code."""
        snap = copy.deepcopy(snapshot if snapshot is not None else load_snapshot())
        base = snap["gpus"][0]
        self.gpus: list[dict[str, Any]] = []
        for i in range(copies):
            g = copy.deepcopy(snap["gpus"][i] if i < len(snap["gpus"]) else base)
            g["index"] = i
            if i >= len(snap["gpus"]):
                g["uuid"] = f"{base['uuid'][:-2]}{i:02d}"
            if procs is not None:
                g["procs"] = procs[i] if i < len(procs) else []
            self.gpus.append(g)
        self.snap = snap
        self.p2p = p2p
        self.topology = topology
        self.init_error = init_error
        self.no_memory_v2 = no_memory_v2
        self.no_procs_v3 = no_procs_v3
        self.errors = dict(errors or {})
        self.calls: Counter[str] = Counter()
        self.nvmlMemory_v2 = 0x02000028

    # ------------------------------------------------------------ helpers

    def _call(self, name: str) -> None:
        self.calls[name] += 1
        if name in self.errors:
            raise NVMLError(self.errors[name])

    def _value(self, h: int, key: str) -> Any:
        g = self.gpus[h]
        if key not in g:
            raise NVMLError(NOT_SUPPORTED)
        value = g[key]
        if isinstance(value, str) and value.startswith("NVMLError: "):
            raise NVMLError(_CODES.get(value.removeprefix("NVMLError: "), NOT_SUPPORTED))
        return value

    # ------------------------------------------------------------ system

    def nvmlInit(self) -> None:
        self._call("nvmlInit")
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._call("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(2)
        return index  # a handle is the index here

    def nvmlSystemGetDriverVersion(self) -> str:
        self._call("nvmlSystemGetDriverVersion")
        return self.snap["driver"]

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._call("nvmlSystemGetNVMLVersion")
        return self.snap["nvml"]

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._call("nvmlSystemGetCudaDriverVersion")
        return self.snap["cuda_driver"]

    # ------------------------------------------------------------ static facts

    def nvmlDeviceGetName(self, h: int) -> str:
        self._call("nvmlDeviceGetName")
        return self._value(h, "name")

    def nvmlDeviceGetUUID(self, h: int) -> str:
        self._call("nvmlDeviceGetUUID")
        return self._value(h, "uuid")

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        self._call("nvmlDeviceGetCudaComputeCapability")
        return tuple(self._value(h, "cc"))  # type: ignore[return-value]

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        self._call("nvmlDeviceGetEnforcedPowerLimit")
        return self._value(h, "power_limit_mw")

    def nvmlDeviceGetMemoryBusWidth(self, h: int) -> int:
        self._call("nvmlDeviceGetMemoryBusWidth")
        return self._value(h, "mem_bus_width")

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock_type: int) -> int:
        self._call("nvmlDeviceGetMaxClockInfo")
        if clock_type != 2:
            raise NVMLError(NOT_SUPPORTED)
        return self._value(h, "max_mem_clock_mhz")

    def nvmlDeviceGetPersistenceMode(self, h: int) -> int:
        self._call("nvmlDeviceGetPersistenceMode")
        return self._value(h, "persistence")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        self._call("nvmlDeviceGetMaxPcieLinkGeneration")
        return self._value(h, "pcie_gen_max")

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h: int) -> int:
        self._call("nvmlDeviceGetGpuMaxPcieLinkGeneration")
        return self._value(h, "pcie_gen_gpu_max")  # not in the snapshot: Not Supported

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        self._call("nvmlDeviceGetMaxPcieLinkWidth")
        return self._value(h, "pcie_width_max")

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        self._call("nvmlDeviceGetNvLinkState")
        return self._value(h, f"nvlink{link}")

    def nvmlDeviceGetP2PStatus(self, ha: int, hb: int, index: int) -> int:
        self._call("nvmlDeviceGetP2PStatus")
        if not isinstance(index, int):  # pynvml's own NVML_P2P_CAPS_INDEX_READ is a tuple
            raise TypeError(f"P2P caps index must be an int, got {index!r}")
        names = ["read", "write", "nvlink", "atomics", "pci"]
        if self.p2p is None or names[index] not in self.p2p:
            raise NVMLError(NOT_SUPPORTED)
        return self.p2p[names[index]]

    def nvmlDeviceGetTopologyCommonAncestor(self, ha: int, hb: int) -> int:
        self._call("nvmlDeviceGetTopologyCommonAncestor")
        if self.topology is None:
            raise NVMLError(NOT_SUPPORTED)
        return self.topology

    # ------------------------------------------------------------ per sample

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> SimpleNamespace:
        if version:
            self._call("nvmlDeviceGetMemoryInfo_v2")
            if self.no_memory_v2:
                raise NVMLError(FUNCTION_NOT_FOUND)
            return SimpleNamespace(**self._value(h, "mem_v2"))
        self._call("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(**self._value(h, "mem_v1"))

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        self._call("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(**self._value(h, "util"))

    def nvmlDeviceGetTemperatureV(self, h: int, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperatureV")
        return self._value(h, "temp_c")

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperature")
        return self._value(h, "temp_c")

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._call("nvmlDeviceGetPowerUsage")
        return self._value(h, "power_mw")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        self._call("nvmlDeviceGetCurrPcieLinkGeneration")
        return self._value(h, "pcie_gen")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        self._call("nvmlDeviceGetCurrPcieLinkWidth")
        return self._value(h, "pcie_width")

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:
        self._call("nvmlDeviceGetFanSpeed")
        return self._value(h, "fan_pct")

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        self._call("nvmlDeviceGetPcieThroughput")  # the real one blocks 20 ms: must never be called
        return self._value(h, "pcie_tx_kbs")

    def _procs(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p.get("usedGpuMemory")) for p in self._value(h, "procs")]

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        self._call("nvmlDeviceGetComputeRunningProcesses")
        if self.no_procs_v3:
            raise NVMLLibraryMismatchError("Unversioned function called and the pyNVML version does not match")
        return self._procs(h)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: int) -> list[SimpleNamespace]:
        self._call("nvmlDeviceGetComputeRunningProcesses_v2")
        return self._procs(h)
