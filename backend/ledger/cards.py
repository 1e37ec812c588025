"""GPU table: memory bandwidth and compute capability by card name (NVML or planner.gpu_name).

Bandwidths are the vendors' published peak figures in GB/s (10^9 bytes/s); the decode ceiling uses
them. Compute capability decides bfloat16 support (>= 8.0). Names are matched case-insensitively on
NVML's spelling ("NVIDIA GeForce RTX 3090", "NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA H100 80GB
HBM3"), most specific pattern first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class CardSpec:
    label: str
    bandwidth_gbs: float
    cc: tuple[int, int]


_TABLE: list[tuple[str, CardSpec]] = [
    # GeForce / workstation, Blackwell
    (r"rtx pro 6000", CardSpec("RTX PRO 6000 Blackwell", 1792, (12, 0))),
    (r"rtx 5090", CardSpec("RTX 5090", 1792, (12, 0))),
    (r"rtx 5080", CardSpec("RTX 5080", 960, (12, 0))),
    (r"rtx 5070 ti", CardSpec("RTX 5070 Ti", 896, (12, 0))),
    (r"rtx 5070", CardSpec("RTX 5070", 672, (12, 0))),
    (r"rtx 5060 ti", CardSpec("RTX 5060 Ti", 448, (12, 0))),
    # Ada
    (r"rtx 6000 ada", CardSpec("RTX 6000 Ada", 960, (8, 9))),
    (r"rtx 4090", CardSpec("RTX 4090", 1008, (8, 9))),
    (r"rtx 4080 super", CardSpec("RTX 4080 SUPER", 736, (8, 9))),
    (r"rtx 4080", CardSpec("RTX 4080", 717, (8, 9))),
    (r"rtx 4070 ti super", CardSpec("RTX 4070 Ti SUPER", 672, (8, 9))),
    (r"rtx 4070", CardSpec("RTX 4070 / 4070 Ti", 504, (8, 9))),
    (r"rtx 4060 ti", CardSpec("RTX 4060 Ti", 288, (8, 9))),
    (r"\bl40s\b", CardSpec("L40S", 864, (8, 9))),
    (r"\bl40\b", CardSpec("L40", 864, (8, 9))),
    (r"\bl20\b", CardSpec("L20", 864, (8, 9))),
    (r"\bl4\b", CardSpec("L4", 300, (8, 9))),
    # Ampere
    (r"rtx 3090 ti", CardSpec("RTX 3090 Ti", 1008, (8, 6))),
    (r"rtx 3090", CardSpec("RTX 3090", 936, (8, 6))),
    (r"rtx 3080 ti", CardSpec("RTX 3080 Ti", 912, (8, 6))),
    (r"rtx 3080", CardSpec("RTX 3080", 760, (8, 6))),
    (r"rtx 3060", CardSpec("RTX 3060", 360, (8, 6))),
    (r"a6000", CardSpec("RTX A6000", 768, (8, 6))),
    (r"a5000", CardSpec("RTX A5000", 768, (8, 6))),
    (r"a4000", CardSpec("RTX A4000", 448, (8, 6))),
    (r"\ba10g?\b", CardSpec("A10 / A10G", 600, (8, 6))),
    (r"\ba30\b", CardSpec("A30", 933, (8, 0))),
    (r"\ba40\b", CardSpec("A40", 696, (8, 6))),
    (r"a100.*80\s?gb.*pcie|a100.*pcie.*80\s?gb|a100 80gb pcie", CardSpec("A100 80GB PCIe", 1935, (8, 0))),
    (r"a100.*80\s?gb", CardSpec("A100 80GB SXM", 2039, (8, 0))),
    (r"a100", CardSpec("A100 40GB", 1555, (8, 0))),
    # Hopper, Blackwell data centre
    (r"gh200", CardSpec("GH200", 4000, (9, 0))),
    (r"h200", CardSpec("H200", 4800, (9, 0))),
    (r"h100.*nvl", CardSpec("H100 NVL", 3900, (9, 0))),
    (r"h100.*pcie", CardSpec("H100 PCIe", 2000, (9, 0))),
    (r"h100", CardSpec("H100 SXM", 3350, (9, 0))),
    (r"h800", CardSpec("H800", 3350, (9, 0))),
    (r"\bh20\b", CardSpec("H20", 4000, (9, 0))),
    (r"\bgb?200\b|\bb200\b", CardSpec("B200", 8000, (10, 0))),
    # Turing, Volta, Pascal
    (r"2080 ti", CardSpec("RTX 2080 Ti", 616, (7, 5))),
    (r"titan rtx", CardSpec("TITAN RTX", 672, (7, 5))),
    (r"\bt4\b", CardSpec("T4", 320, (7, 5))),
    (r"v100s", CardSpec("V100S", 1134, (7, 0))),
    (r"v100", CardSpec("V100", 900, (7, 0))),
    (r"p100", CardSpec("P100", 732, (6, 0))),
    (r"\bp40\b", CardSpec("P40", 346, (6, 1))),
]
_COMPILED = [(re.compile(p), spec) for p, spec in _TABLE]


def find(name: str | None) -> CardSpec | None:
    """The table entry for an NVML/planner card name, or None for an unknown card."""
    if not name:
        return None
    n = re.sub(r"[-_]", " ", name.lower())
    for rx, spec in _COMPILED:
        if rx.search(n):
            return spec
    return None
