"""NVML sampling for the GPU panel.

Plain, blocking Python: the TUI calls ``GpuMonitor.sample()`` from a thread about once a second.
NVML is initialised once and the device handles and static facts are read once (tech brief §7).

"Not Supported" from NVML is a value, not an error: the field becomes ``None`` (shown as "N/A") and
that field is not asked again on that GPU. A missing library, a driver that is not loaded or any
other start-up failure makes ``available()`` false with a ``reason``; nothing is raised to the caller.

``GpuMonitor(nvml=fake)`` takes any object with pynvml's function names and an ``NVMLError`` class
whose instances carry ``.value`` (the NVML error code); tests use one built from a recorded snapshot.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:
    from backend.gpu_facts import GpuInfo, GpuSample, P2PStatus

# NVML error codes (nvml.h); compared through ``err.value`` so an injected fake needs no constants.
ERR_INVALID_ARGUMENT = 2
ERR_NOT_SUPPORTED = 3
ERR_NO_PERMISSION = 4
ERR_DRIVER_NOT_LOADED = 9
ERR_LIBRARY_NOT_FOUND = 12
ERR_FUNCTION_NOT_FOUND = 13
ERR_GPU_IS_LOST = 15
ERR_LIB_RM_VERSION_MISMATCH = 18
ERR_ARGUMENT_VERSION_MISMATCH = 25

TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
CLOCK_MEM = 2  # NVML_CLOCK_MEM
FEATURE_ENABLED = 1  # NVML_FEATURE_ENABLED
NVLINK_MAX_LINKS = 18  # enough for every shipped part; the loop stops at the first unsupported link
MEMORY_V2 = 0x02000028  # nvmlMemory_v2 = sizeof(nvmlMemory_v2_t) | 2 << 24

# NVML_P2P_CAPS_INDEX_*. Literal ints on purpose: nvidia-ml-py defines NVML_P2P_CAPS_INDEX_READ
# as ``0,`` (a tuple), which ctypes cannot pass.
P2P_CAPS = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3, "pci": 4}
P2P_STATUS = {
    0: "OK",
    1: "chipset not supported",
    2: "GPU not supported",
    3: "IOH topology not supported",
    4: "disabled by regkey",
    5: "not supported",
    6: "unknown",
}
TOPOLOGY = {
    0: "same board (internal)",
    10: "single PCIe switch (PIX)",
    20: "multiple PCIe switches (PXB)",
    30: "PCIe host bridge (PHB)",
    40: "same NUMA node (NODE)",
    50: "across CPU sockets (SYS)",
}

_INIT_HINTS = {
    ERR_LIBRARY_NOT_FOUND: "libnvidia-ml.so.1 not found: no NVIDIA driver on this machine",
    ERR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded",
    ERR_NO_PERMISSION: "no permission to open the NVIDIA devices",
    ERR_LIB_RM_VERSION_MISMATCH: "NVML library and kernel driver versions differ (reboot after a driver update?)",
}


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _load_pynvml() -> Any:
    import pynvml  # noqa: PLC0415 - lazy on purpose: the app must start without it

    return pynvml


class GpuMonitor:
    """NVML handles and static facts, read once; ``sample()`` and ``processes()`` per poll.

    Thread-safe (one lock around NVML calls). Never raises NVML errors: check ``available()``.
    """

    def __init__(self, indices: Iterable[int] | None = None, nvml: Any = None, start: bool = True) -> None:
        """start=False: NVML is opened on first use (``start()``, ``available()``, ``reason``, a
        sample), by whichever thread comes first; the others wait for it. The console makes its
        monitor so and opens it in a thread after its first frame."""
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()  # held while NVML opens (only ever with start=False)
        self._deferred: tuple[Iterable[int] | None, Any] = (indices, nvml)
        self._opened = False  # set once the start is over, whichever way it went
        self._closed = False
        self._nvml: Any = None
        self._initialised = False
        self._reason: str | None = None
        self._handles: list[tuple[int, Any]] = []
        self._unsupported: set[tuple[int, str]] = set()
        self._memory_v1_only: set[int] = set()
        self._procs_v2_only = False
        self.gpus: tuple[GpuInfo, ...] = ()
        self.p2p: tuple[P2PStatus, ...] = ()
        self.driver_version: str | None = None
        self.nvml_version: str | None = None
        self.cuda_driver_version: int | None = None
        self.init_seconds: float | None = None
        if start:
            self.start()

    def start(self) -> None:
        """Open NVML (once; a no-op after that). A monitor made with start=False opens on its first
        use; this is blocking (pynvml's import, nvmlInit, the static facts): call it from a thread."""
        if self._opened:
            return
        with self._start_lock:
            if self._opened:  # another thread opened it while this one waited
                return
            if not self._closed:  # shut down before it was ever used: it stays closed
                try:
                    self._start(*self._deferred)
                except Exception as exc:  # noqa: BLE001 - the contract: start-up never raises
                    self._fail(self._describe(exc, "NVML start-up failed"))
            self._opened = True
        if self._closed:  # shut down while it opened (or it failed): NVML released
            self.shutdown()

    # ---------------------------------------------------------------- state

    def available(self) -> bool:
        self.start()
        return self._reason is None

    @property
    def reason(self) -> str | None:
        """Why no GPU data is available (None when it is)."""
        self.start()
        return self._reason

    @property
    def unsupported(self) -> list[str]:
        """Fields NVML reported as Not Supported, as ``"gpuN.field"``."""
        self.start()
        return sorted(f"gpu{i}.{f}" for i, f in self._unsupported)

    def _fail(self, reason: str) -> None:
        self._reason = reason
        self._handles = []
        self.shutdown(reason)

    def _describe(self, exc: BaseException, what: str) -> str:
        if isinstance(exc, ImportError):
            return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
        hint = _INIT_HINTS.get(getattr(exc, "value", -1))
        detail = f"{type(exc).__name__}: {exc}"
        return f"{what}: {hint} ({detail})" if hint else f"{what}: {detail}"

    # ---------------------------------------------------------------- start-up

    def _start(self, indices: Iterable[int] | None, nvml: Any) -> None:
        self._nvml = nvml if nvml is not None else _load_pynvml()
        n = self._nvml
        t0 = time.perf_counter()
        n.nvmlInit()
        self._initialised = True
        self.init_seconds = time.perf_counter() - t0
        count = n.nvmlDeviceGetCount()
        wanted = list(range(count)) if indices is None else list(indices)
        missing = [i for i in wanted if not 0 <= i < count]
        if missing:
            self._fail(f"GPU index {missing} not present: NVML sees {count} GPU(s)")
            return
        if not wanted:
            self._fail("NVML sees no NVIDIA GPU")
            return
        self._handles = [(i, n.nvmlDeviceGetHandleByIndex(i)) for i in wanted]
        self.driver_version = self._static(-1, "driver", n.nvmlSystemGetDriverVersion)
        self.nvml_version = self._static(-1, "nvml", n.nvmlSystemGetNVMLVersion)
        self.cuda_driver_version = self._static(-1, "cuda", n.nvmlSystemGetCudaDriverVersion)
        if self.driver_version is not None:
            self.driver_version = _text(self.driver_version)
        if self.nvml_version is not None:
            self.nvml_version = _text(self.nvml_version)
        self.gpus = tuple(self._read_info(i, h) for i, h in self._handles)
        self.p2p = tuple(
            self._read_p2p(ia, ha, ib, hb)
            for k, (ia, ha) in enumerate(self._handles)
            for ib, hb in self._handles[k + 1 :]
        )

    def _static(self, index: int, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        errors: list[str] = []
        return self._get(index, field, errors, fn, *args)

    def _read_info(self, index: int, h: Any) -> GpuInfo:
        from backend.gpu_facts import GpuInfo  # start-up: made once NVML is open, after the first frame

        n = self._nvml
        def s(field: str, fn: Any, *a: Any) -> Any:
            return self._static(index, field, fn, h, *a)

        mem = s("memory_total", n.nvmlDeviceGetMemoryInfo)
        cc = s("compute_capability", n.nvmlDeviceGetCudaComputeCapability)
        limit_mw = s("power_limit", n.nvmlDeviceGetEnforcedPowerLimit)
        bus = s("memory_bus_width", n.nvmlDeviceGetMemoryBusWidth)
        mem_clock = s("max_mem_clock", n.nvmlDeviceGetMaxClockInfo, CLOCK_MEM)
        persistence = s("persistence_mode", n.nvmlDeviceGetPersistenceMode)
        bandwidth = None
        if bus and mem_clock:
            bandwidth = round(bus * mem_clock * 2 / 8 / 1000, 1)
        nvlink_supported, links = self._nvlink(index, h)
        name = s("name", n.nvmlDeviceGetName)
        uuid = s("uuid", n.nvmlDeviceGetUUID)
        return GpuInfo(
            index=index,
            name=_text(name) if name is not None else f"GPU {index}",
            uuid=_text(uuid) if uuid is not None else None,
            memory_total_bytes=int(mem.total) if mem is not None else None,
            compute_capability=(int(cc[0]), int(cc[1])) if cc is not None else None,
            power_limit_w=limit_mw / 1000 if limit_mw is not None else None,
            pcie_gen_max=s("pcie_gen_max", n.nvmlDeviceGetMaxPcieLinkGeneration),
            pcie_gen_gpu_max=s("pcie_gen_gpu_max", getattr(n, "nvmlDeviceGetGpuMaxPcieLinkGeneration", None)),
            pcie_width_max=s("pcie_width_max", n.nvmlDeviceGetMaxPcieLinkWidth),
            memory_bus_width_bits=bus,
            max_mem_clock_mhz=mem_clock,
            memory_bandwidth_gbs=bandwidth,
            persistence_mode=bool(persistence) if persistence is not None else None,
            nvlink_supported=nvlink_supported,
            nvlink_active_links=links,
        )

    def _nvlink(self, index: int, h: Any) -> tuple[bool, int]:
        fn = getattr(self._nvml, "nvmlDeviceGetNvLinkState", None)
        if fn is None:
            return False, 0
        supported, active = False, 0
        for link in range(NVLINK_MAX_LINKS):
            try:
                state = fn(h, link)
            except Exception:  # noqa: BLE001 - NotSupported / InvalidArgument end the list of links
                break
            supported = True
            active += state == FEATURE_ENABLED
        return supported, active

    def _read_p2p(self, ia: int, ha: Any, ib: int, hb: Any) -> P2PStatus:
        from backend.gpu_facts import P2PStatus  # start-up: as GpuInfo

        n = self._nvml
        caps: dict[str, str | None] = {}
        for cap, idx in P2P_CAPS.items():
            status = self._static(ia, f"p2p{ib}.{cap}", n.nvmlDeviceGetP2PStatus, ha, hb, idx)
            caps[cap] = P2P_STATUS.get(status, f"status {status}") if status is not None else None
        ancestor = getattr(n, "nvmlDeviceGetTopologyCommonAncestor", None)
        level = self._static(ia, f"topology{ib}", ancestor, ha, hb) if ancestor is not None else None
        topo = TOPOLOGY.get(level, f"level {level}") if level is not None else None
        return P2PStatus(gpu_a=ia, gpu_b=ib, topology=topo, **caps)

    # ---------------------------------------------------------------- reads

    def _is_nvml_error(self, exc: BaseException) -> bool:
        n = self._nvml
        classes = tuple(
            c
            for c in (getattr(n, "NVMLError", None), getattr(n, "NVMLLibraryMismatchError", None))
            if isinstance(c, type)
        )
        return bool(classes) and isinstance(exc, classes)

    def _get(self, index: int, field: str, errors: list[str], fn: Callable[..., Any] | None, *args: Any) -> Any:
        """Call an NVML function; Not Supported (or absent) becomes None and is not asked again."""
        key = (index, field)
        if key in self._unsupported:
            return None
        if fn is None:
            self._unsupported.add(key)
            return None
        try:
            return fn(*args)
        except Exception as exc:
            if not self._is_nvml_error(exc):
                raise
            if getattr(exc, "value", None) in (ERR_NOT_SUPPORTED, ERR_FUNCTION_NOT_FOUND):
                self._unsupported.add(key)
            else:
                errors.append(f"{field}: {exc}")
            return None

    def _memory(self, index: int, h: Any, errors: list[str]) -> tuple[Any, str]:
        n = self._nvml
        if index not in self._memory_v1_only:
            version = getattr(n, "nvmlMemory_v2", MEMORY_V2)
            try:
                return n.nvmlDeviceGetMemoryInfo(h, version=version), "v2"
            except TypeError:  # an old nvidia-ml-py without the version argument
                self._memory_v1_only.add(index)
            except Exception as exc:
                if not self._is_nvml_error(exc):
                    raise
                if getattr(exc, "value", None) not in (
                    ERR_NOT_SUPPORTED, ERR_FUNCTION_NOT_FOUND, ERR_ARGUMENT_VERSION_MISMATCH
                ):
                    errors.append(f"memory: {exc}")
                    return None, "v2"
                self._memory_v1_only.add(index)  # driver < 515: fall back for good
        return self._get(index, "memory", errors, n.nvmlDeviceGetMemoryInfo, h), "v1"

    def _temperature(self, index: int, h: Any, errors: list[str]) -> Any:
        n = self._nvml
        fn_v = getattr(n, "nvmlDeviceGetTemperatureV", None)  # the unversioned call is deprecated
        if fn_v is not None and (index, "temperature_v") not in self._unsupported:
            value = self._get(index, "temperature_v", errors, fn_v, h, TEMPERATURE_GPU)
            if (index, "temperature_v") not in self._unsupported:
                return value
        return self._get(index, "temperature", errors, getattr(n, "nvmlDeviceGetTemperature", None), h, TEMPERATURE_GPU)

    def sample(self) -> list[GpuSample]:
        """Read every monitored GPU once (about 0.1 ms per GPU on an H200). [] when unavailable."""
        self.start()
        with self._lock:
            if not self._handles:
                return []
            return [self._sample_one(info, h) for info, (_, h) in zip(self.gpus, self._handles, strict=False)]

    def _sample_one(self, info: GpuInfo, h: Any) -> GpuSample:
        from backend.gpu_facts import GpuSample  # start-up: as GpuInfo

        n, i = self._nvml, info.index
        errors: list[str] = []
        def get(field: str, fn: Any, *a: Any) -> Any:
            return self._get(i, field, errors, fn, h, *a)

        mem, source = self._memory(i, h, errors)
        util = get("utilization", n.nvmlDeviceGetUtilizationRates)
        power_mw = get("power", n.nvmlDeviceGetPowerUsage)
        return GpuSample(
            index=i,
            name=info.name,
            timestamp=time.time(),
            memory_used_bytes=int(mem.used) if mem is not None else None,
            memory_total_bytes=int(mem.total) if mem is not None else info.memory_total_bytes,
            memory_reserved_bytes=int(mem.reserved) if mem is not None and source == "v2" else None,
            memory_source=source,
            utilization_gpu_pct=int(util.gpu) if util is not None else None,
            utilization_memory_pct=int(util.memory) if util is not None else None,
            temperature_c=self._temperature(i, h, errors),
            power_w=power_mw / 1000 if power_mw is not None else None,
            power_limit_w=info.power_limit_w,
            pcie_gen=get("pcie_gen", n.nvmlDeviceGetCurrPcieLinkGeneration),
            pcie_gen_max=info.pcie_gen_max,
            pcie_width=get("pcie_width", n.nvmlDeviceGetCurrPcieLinkWidth),
            pcie_width_max=info.pcie_width_max,
            fan_pct=get("fan", n.nvmlDeviceGetFanSpeed),
            errors=tuple(errors),
        )

    def processes_by_gpu(self) -> dict[int, dict[int, int | None]]:
        """GPU index -> {pid: used bytes}. Bytes are None where NVML cannot tell (e.g. some containers).

        PIDs are as the driver sees them: host PIDs, even inside a container.
        """
        self.start()
        with self._lock:
            return {i: self._procs_one(i, h) for i, h in self._handles}

    def processes(self, indices: Iterable[int] | None = None) -> dict[int, int | None]:
        """pid -> GPU bytes used, summed over the monitored GPUs, or only those of ``indices``
        (None when NVML gave no figure)."""
        wanted = None if indices is None else set(indices)
        total: dict[int, int | None] = {}
        for index, per_gpu in self.processes_by_gpu().items():
            if wanted is not None and index not in wanted:
                continue
            for pid, used in per_gpu.items():
                if used is None:
                    total.setdefault(pid, None)
                else:
                    total[pid] = (total.get(pid) or 0) + used
        return total

    def _procs_one(self, index: int, h: Any) -> dict[int, int | None]:
        n = self._nvml
        errors: list[str] = []
        if not self._procs_v2_only:
            try:
                procs = n.nvmlDeviceGetComputeRunningProcesses(h)  # _v3
            except Exception as exc:
                mismatch = type(exc).__name__ == "NVMLLibraryMismatchError"
                if not (mismatch or getattr(exc, "value", None) == ERR_FUNCTION_NOT_FOUND):
                    if not self._is_nvml_error(exc):
                        raise
                    return {}
                self._procs_v2_only = True  # driver < 510.39
        if self._procs_v2_only:
            procs = self._get(index, "processes_v2", errors,
                              getattr(n, "nvmlDeviceGetComputeRunningProcesses_v2", None), h) or []
        out: dict[int, int | None] = {}
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            pid = int(p.pid)
            if used is None:
                out.setdefault(pid, None)
            else:
                out[pid] = (out.get(pid) or 0) + int(used)
        return out

    # ---------------------------------------------------------------- end

    def shutdown(self, reason: str = "NVML was shut down") -> None:
        """Release NVML. Safe to call twice; ``available()`` is false afterwards. A monitor never
        opened stays closed (this does not wait for one opening in another thread: that one closes
        itself when done)."""
        self._closed = True
        with self._lock:
            self._handles = []
            if self._reason is None:
                self._reason = reason
            if self._initialised:
                self._initialised = False
                try:
                    self._nvml.nvmlShutdown()
                except Exception:  # noqa: BLE001 - nothing useful to do at exit
                    pass

    def __enter__(self) -> GpuMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def info_dict(self) -> dict[str, Any]:
        """Static facts as plain data (for JSON and the About panel)."""
        from dataclasses import asdict  # start-up: as GpuInfo

        self.start()
        return {
            "available": self.available(),
            "reason": self._reason,
            "driver": self.driver_version,
            "nvml": self.nvml_version,
            "cuda_driver": self.cuda_driver_version,
            "gpus": [asdict(g) for g in self.gpus],
            "p2p": [dict(asdict(p), ok=p.ok) for p in self.p2p],
        }
