"""Which CUDA major the installed vLLM/torch were built for, and where their libraries are.

Never a constant: torch 2.11.0+cu130 and vLLM 0.20.2 load ``libcublas.so.13`` from
``site-packages/nvidia/cu13/lib``, older builds ``libcublas.so.12`` from ``nvidia/cublas/lib``.
The answer comes, in this order, from
1. torch's version tag in its package metadata (``2.11.0+cu130`` -> 13; ``+cpu`` -> no CUDA);
2. the ``nvidia-*`` requirements torch or vLLM declare (``nvidia-cublas-cu12`` -> 12,
   ``nvidia-cublas==13.0.*`` / ``nvidia-cuda-runtime==13.*`` -> 13; how the CUDA 13 wheels are named);
3. the ``NEEDED`` entries of vLLM's ``_C`` extension (``libcudart.so.13``), read from its ELF header.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

_LOCAL_CU = re.compile(r"\+cu(\d{2,3})\b")
_REQ_SUFFIX = re.compile(r"^nvidia-(?:cublas|cuda-runtime|cuda-nvrtc|cudnn)-cu(\d{2})\b", re.I)
_REQ_CU13 = re.compile(r"^nvidia-(?:cublas|cuda-runtime)\s*[=~<>!]=*\s*(\d{2})\.", re.I)
_NEEDED_CUDART = re.compile(rb"libcudart\.so\.(\d{2})")


@dataclass(frozen=True)
class CudaBuild:
    major: int | None  # None: unknown, or a CPU build (cpu=True)
    source: str  # how it was found, said in the doctor's message
    cpu: bool = False

    @property
    def cublas(self) -> str | None:
        return f"libcublas.so.{self.major}" if self.major else None


def _metadata(site: Path, dist: str) -> str | None:
    """The METADATA text of `dist` (normalised name) in one site dir."""
    for info in sorted(site.glob("*.dist-info")):
        name = info.name[: -len(".dist-info")].rsplit("-", 1)[0].lower().replace("_", "-").replace(".", "-")
        if name == dist:
            try:
                return (info / "METADATA").read_text(encoding="utf-8", errors="replace")
            except OSError:
                return None
    return None


def _field(meta: str, key: str) -> list[str]:
    return [ln.split(":", 1)[1].strip() for ln in meta.splitlines() if ln.startswith(key + ":")]


def major_from_version(version: str) -> tuple[int | None, bool]:
    """('2.11.0+cu130') -> (13, False); '2.13.0+cpu' -> (None, True); '2.5.1' -> (None, False)."""
    if "+cpu" in version:
        return None, True
    m = _LOCAL_CU.search(version)
    return (int(m.group(1)) // 10, False) if m else (None, False)


def major_from_requirements(reqs: list[str]) -> int | None:
    for req in reqs:
        req = req.split(";")[0].strip()
        m = _REQ_SUFFIX.match(req) or _REQ_CU13.match(req)
        if m:
            return int(m.group(1))
    return None


def elf_needed(path: Path) -> list[str]:
    """DT_NEEDED entries of a 64-bit little-endian ELF shared object ([] when unreadable)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    try:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        dyn = next((s for s in sections if s[1] == 6), None)  # SHT_DYNAMIC
        if dyn is None:
            return []
        strtab = sections[dyn[6]]  # sh_link: the dynamic string table
        out = []
        for off in range(dyn[4], dyn[4] + dyn[5], 16):
            tag, val = struct.unpack_from("<qQ", data, off)
            if tag == 0:
                break
            if tag == 1:  # DT_NEEDED
                start = strtab[4] + val
                out.append(data[start:data.index(b"\0", start)].decode("ascii", "replace"))
        return out
    except (struct.error, IndexError, ValueError):
        return []


def detect(site_dirs: list[str]) -> CudaBuild:
    sites = [Path(d) for d in site_dirs if d and Path(d).is_dir()]
    for site in sites:
        meta = _metadata(site, "torch")
        if meta:
            version = (_field(meta, "Version") or [""])[0]
            major, cpu = major_from_version(version)
            if cpu:
                return CudaBuild(None, f"torch {version} is a CPU build", cpu=True)
            if major:
                return CudaBuild(major, f"torch {version}")
            major = major_from_requirements(_field(meta, "Requires-Dist"))
            if major:
                return CudaBuild(major, f"torch {version} requires CUDA {major} wheels")
    for site in sites:
        meta = _metadata(site, "vllm")
        if meta:
            major = major_from_requirements(_field(meta, "Requires-Dist"))
            if major:
                return CudaBuild(major, f"vllm {(_field(meta, 'Version') or ['?'])[0]} requires CUDA {major} wheels")
        for ext in sorted(site.glob("vllm/_C*.so")):
            for lib in elf_needed(ext):
                m = _NEEDED_CUDART.search(lib.encode())
                if m:
                    return CudaBuild(int(m.group(1)), f"{ext.name} links {lib}")
    return CudaBuild(None, "no torch or vllm metadata found")


def library_dirs(site_dirs: list[str], major: int | None) -> list[Path]:
    """Where the nvidia-* wheels put the CUDA libraries: nvidia/cu13/lib (CUDA 13 wheels),
    nvidia/cublas/lib (CUDA 12 wheels), any other nvidia/*/lib."""
    out: list[Path] = []
    for d in site_dirs:
        base = Path(d) / "nvidia"
        if not base.is_dir():
            continue
        first = [base / f"cu{major}" / "lib"] if major else []
        out += first + [base / "cublas" / "lib"] + sorted(p for p in base.glob("*/lib") if p not in first)
    return list(dict.fromkeys(out))
