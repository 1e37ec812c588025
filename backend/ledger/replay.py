"""Plan a recorded GPU run again from its fixture header and compare with what vLLM printed.

A calibration log (benchmarks/gpu_calibrate.py) starts with `#` lines that state everything the plan
needs: ``# qwen-tui-settings: {json}`` (the [server] table the run used), ``# nvml: {json}`` (board
memory and the driver's reserved share) and the shape: ``# model-config: {json}`` (the run's
config.json) or, in older fixtures, ``# model:`` naming a built-in shape. The compile cache state is
read from vLLM's own lines: "saved AOT compiled function" (cold: it compiled) or "Directly load AOT
compilation" (warm). Used by tests/test_ledger_gpu_runs.py and benchmarks/bench_ledger_truth.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.ledger.core import Card, Ledger, PlanParams, plan
from backend.ledger.shapes import from_config, lookup
from backend.logparse import LogParser

_SHAPE = re.compile(r"# model: (Qwen2\.5-\d+B)-Instruct's exact shape")
_VERSION = re.compile(r"version (\d+\.\d+\.\d+)")


@dataclass(frozen=True)
class Replay:
    name: str
    ledger: Ledger
    vllm: dict[str, Any]  # what the log says (LogParser snapshot)
    compile_cache: str

    def error_pct(self, key: str) -> float | None:
        want = self.vllm.get(key)
        got = getattr(self.ledger, key, None)
        if not want or got is None:
            return None
        return float(100.0 * (got - want) / want)


def header(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        key, _, value = line[1:].strip().partition(": ")
        out[key] = value
    return out


def replay(path: Path) -> Replay | None:
    """The plan of one calibration log, or None when its header does not say enough."""
    text = path.read_text(errors="replace")
    head = header(text)
    if "qwen-tui-settings" not in head or "nvml" not in head:
        return None
    server = json.loads(head["qwen-tui-settings"])
    nv = json.loads(head["nvml"])
    shape = None
    if head.get("model-config", "{}") != "{}":
        try:
            shape = from_config(json.loads(head["model-config"]), path.stem, source="fixture header")
        except (ValueError, KeyError):
            shape = None
    if shape is None:
        m = _SHAPE.search("# model: " + head.get("model", ""))
        shape = lookup(m.group(1)) if m else None
    if shape is None:
        return None
    parser = LogParser()
    for line in text.splitlines():
        if not line.startswith("#"):
            parser.feed(line)
    snap = parser.snapshot()
    cache = "warm" if "Directly load AOT compilation" in text else "cold"
    found = _VERSION.search(text)
    version = snap.get("vllm_version") or (found.group(1) if found else None)
    params = PlanParams(
        model=str(server.get("model")), dtype=server.get("dtype"), kv_cache_dtype=server.get("kv_cache_dtype"),
        tensor_parallel_size=int(server.get("tensor_parallel_size") or 1),
        gpu_memory_utilization=server.get("gpu_memory_utilization"), max_model_len=server.get("max_model_len"),
        max_num_seqs=server.get("max_num_seqs"), max_num_batched_tokens=server.get("max_num_batched_tokens"),
        block_size=server.get("block_size"), enforce_eager=server.get("enforce_eager"),
        vllm_version=version, compile_cache=cache)
    card = Card(str(nv.get("name") or "GPU"), int(nv["total_bytes"]),
                memory_reserved_bytes=nv.get("reserved_bytes"), source="nvml")
    return Replay(path.stem, plan(shape, params, [card]), snap, cache)
