"""What this box measured, launch after launch: the ledger's learned correction (issue 27).

The supervisor leaves each launch's vLLM log in the state dir (state/logs/vllm-*.log). `refresh()` reads the
ones it has not read yet and keeps, per launch, what vLLM said it ran with (its "non-default args", else the
launch marker's argv) and what it measured: the KV cache (tokens and GiB), the per-worker breakdown (GPU:
free memory at start, requested, weights, non-torch, activation peak, CUDA graphs; CPU: node memory,
requested, non-kv), whether torch.compile's cache was warm, and vLLM's own compile-cache key. They are kept in
state/ledger-measurements.json, keyed by vLLM version, device, model, dtype, KV dtype, TP/PP, eager,
max_num_batched_tokens, max_num_seqs, max_model_len and utilization.

A later plan takes the nearest measurement (same vLLM version, device, model, dtype, TP/PP, quantization; then
the fewest differing settings; the newest first) and corrects the model by what it missed there:

    kv(new settings) = model(new settings) - (model(measured settings) - vLLM's kv(measured settings))

The model runs on both sides, so what a change drops (CUDA graphs under enforce_eager, the cold-compile peak on
a warm start) or adds (a larger batch's activation) stays modelled; only the box's own share (driver, runtime,
allocator, what the model does not know about this vLLM) is carried. Nothing is fitted across boxes.

Warm or cold: vLLM's torch.compile cache key covers every setting but the utilization (the H200 runs of
tests/fixtures/gpu/calibration: utilization 0.25 and 0.90 share a key; max_model_len, max_num_seqs,
max_num_batched_tokens and the KV dtype each change it). A start whose settings match a kept launch but for the
utilization, with that cache folder still on disk, is planned warm.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from backend.ledger.core import plan
from backend.ledger.overheads import GiB, behaviour, parse_version
from backend.ledger.shapes import ModelShape
from backend.ledger.types import Card, Ledger, PlanParams, Problem
from backend.logparse import LogParser

STORE = "ledger-measurements.json"
SCHEMA = 1
MAX_RECORDS = 200
# settings that must match for a measurement to apply at all
# (a launch with the KV cache pinned measured nothing the model could miss: it only matches pinned plans)
_SAME = ("model", "dtype", "tensor_parallel_size", "pipeline_parallel_size", "quantization", "kv_cache_memory_bytes")
# settings a plan may change and still use the measurement (each difference costs one in the distance)
_NEAR = ("kv_cache_dtype", "enforce_eager", "max_num_batched_tokens", "max_num_seqs", "max_model_len",
         "gpu_memory_utilization", "block_size")
_FLAGS = {"--model": "model", "--dtype": "dtype", "--kv-cache-dtype": "kv_cache_dtype",
          "--tensor-parallel-size": "tensor_parallel_size", "--pipeline-parallel-size": "pipeline_parallel_size",
          "--gpu-memory-utilization": "gpu_memory_utilization", "--max-model-len": "max_model_len",
          "--max-num-seqs": "max_num_seqs", "--max-num-batched-tokens": "max_num_batched_tokens",
          "--block-size": "block_size", "--quantization": "quantization",
          "--kv-cache-memory-bytes": "kv_cache_memory_bytes"}
_INTS = ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
         "block_size", "kv_cache_memory_bytes")


def _norm(key: str, value: Any) -> Any:
    """One spelling per setting: vLLM's defaults (None, 'auto', 1 for TP/PP, False for eager) as None."""
    if value in (None, "", "auto", "None"):
        return None
    if key in _INTS:
        try:
            v = int(value)
        except (TypeError, ValueError):
            return None
        return None if key in ("tensor_parallel_size", "pipeline_parallel_size") and v == 1 else v
    if key == "gpu_memory_utilization":
        try:
            return round(float(value), 4)
        except (TypeError, ValueError):
            return None
    if key == "enforce_eager":
        return True if value in (True, "True", "true", 1) else None
    if key == "model":
        return str(value).rstrip("/")
    return str(value)


def settings_of(params: PlanParams) -> dict[str, Any]:
    return {k: _norm(k, getattr(params, k, None)) for k in _SAME + _NEAR}


def _from_argv(argv: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "serve" in argv:  # `vllm serve MODEL ...`
        i = argv.index("serve")
        if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out["model"] = argv[i + 1]
    for i, a in enumerate(argv):
        flag, eq, val = a.partition("=")
        if flag in _FLAGS:
            out[_FLAGS[flag]] = val if eq else (argv[i + 1] if i + 1 < len(argv) else None)
        elif a == "--enforce-eager":
            out["enforce_eager"] = True
    return out


def measure_log(path: Path) -> dict[str, Any] | None:
    """One launch's record from its vLLM log, or None when the log never reached its KV cache figures."""
    p = LogParser()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                p.feed(line.rstrip("\n"))
    except OSError:
        return None
    p.end_of_log()
    rep = p.report()
    tokens, gib = rep.get("kv_cache_tokens"), rep.get("kv_cache_gib")
    if not tokens and gib is None:
        return None
    # the argv qwen-tui launched (settings as the plan sees them: vLLM's defaults left out); without the
    # launch marker, what vLLM printed of its arguments
    raw: dict[str, Any] = (_from_argv(p.launch.argv) if p.launch is not None
                           else {k: p.info[k] for k in _SAME + _NEAR if k in p.info})
    br = rep.get("breakdown") or {}
    device = "cpu" if any("node_total_gib" in t for t in br.values()) else "cuda"
    at = rep.get("launched_at")
    if at is None:
        try:
            at = path.stat().st_mtime
        except OSError:
            at = time.time()
    return {"log": path.name, "at": float(at), "vllm_version": rep.get("vllm_version"), "device": device,
            "settings": {k: _norm(k, raw.get(k)) for k in _SAME + _NEAR},
            "kv_cache_tokens": tokens, "kv_cache_gib": gib, "breakdown": br,
            "backsolved": rep.get("backsolved") or {},
            "compile_cache": rep.get("compile_cache"), "compile_cache_key": p.figures.get("compile_cache_key"),
            "compile_cache_dir": p.figures.get("compile_cache_dir"), "ready": bool(p.was_ready)}


def _store_path(state: Path) -> Path:
    return state / STORE


def load(state: Path) -> dict[str, Any]:
    try:
        data = json.loads(_store_path(state).read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("schema") == SCHEMA and isinstance(data.get("records"), list):
            return data
    except (OSError, ValueError):
        pass
    return {"schema": SCHEMA, "records": [], "seen": {}}


def save(state: Path, data: dict[str, Any]) -> None:
    """Atomically (a plan never reads half a file)."""
    path = _store_path(state)
    tmp = path.with_suffix(f".tmp.{os.getpid()}")
    try:
        state.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def refresh(state: Path, logs: Path | None = None) -> list[dict[str, Any]]:
    """Read the launch logs not read yet (by name and size), keep their records, return them all."""
    logs = logs or state / "logs"
    data = load(state)
    seen: dict[str, int] = data.setdefault("seen", {})
    changed = False
    try:
        files = sorted(logs.glob("vllm-*.log"))
    except OSError:
        files = []
    for f in files:
        try:
            size = f.stat().st_size
        except OSError:
            continue
        if seen.get(f.name) == size:
            continue
        rec = measure_log(f)
        seen[f.name] = size
        changed = True
        data["records"] = [r for r in data["records"] if r.get("log") != f.name]
        if rec is not None:
            data["records"].append(rec)
    if changed:
        data["records"] = sorted(data["records"], key=lambda r: r.get("at") or 0)[-MAX_RECORDS:]
        save(state, data)
    return list(data["records"])


def _same_version(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and parse_version(a) == parse_version(b)


@dataclass(frozen=True)
class Match:
    record: dict[str, Any]
    distance: int
    launches: int  # kept launches of these same settings (the count the basis names)
    differs: tuple[str, ...]


def nearest(records: list[dict[str, Any]], params: PlanParams) -> Match | None:
    want = settings_of(params)
    best: tuple[int, float, dict[str, Any]] | None = None
    for r in records:
        s = r.get("settings") or {}
        if r.get("device") != params.device or not _same_version(r.get("vllm_version"), params.vllm_version):
            continue
        if any(s.get(k) != want[k] for k in _SAME):
            continue
        if not r.get("kv_cache_tokens") and not (r.get("kv_cache_gib") or 0) > 0:
            continue  # a launch that failed before a KV cache (its compile cache still counts: compile_warm)
        d = sum(1 for k in _NEAR if s.get(k) != want[k])
        if best is None or (d, -(r.get("at") or 0)) < (best[0], -best[1]):
            best = (d, r.get("at") or 0, r)
    if best is None:
        return None
    rec = best[2]
    same = [r for r in records if r.get("settings") == rec.get("settings") and r.get("device") == rec.get("device")
            and _same_version(r.get("vllm_version"), rec.get("vllm_version"))]
    differs = tuple(k for k in _NEAR if (rec.get("settings") or {}).get(k) != want[k])
    return Match(rec, best[0], len(same), differs)


def compile_warm(records: list[dict[str, Any]], params: PlanParams, cache_root: Path | None = None) -> bool:
    """Whether vLLM's torch.compile cache already holds these settings: a kept launch with the same settings but
    the utilization compiled them, and its cache folder is still there."""
    if params.device == "cpu" or params.enforce_eager:
        return False
    want = {k: v for k, v in settings_of(params).items() if k != "gpu_memory_utilization"}
    for r in records:
        s = {k: v for k, v in (r.get("settings") or {}).items() if k != "gpu_memory_utilization"}
        # a launch that failed after compiling (the KV cache too small) still left its cache
        if (s != want or not _same_version(r.get("vllm_version"), params.vllm_version)
                or not (r.get("compile_cache") or r.get("compile_cache_key"))):
            continue
        folder = r.get("compile_cache_dir")
        if not folder:
            return True
        root = Path(folder)
        if cache_root is not None:
            root = cache_root / root.name
        if root.is_dir():
            return True
    return False


def params_of(record: dict[str, Any], like: PlanParams) -> PlanParams:
    """The PlanParams of a measured launch (device, version and env from `like`)."""
    s = record.get("settings") or {}
    out = replace(like)
    for k in _SAME + _NEAR:
        if k == "model":
            continue
        v = s.get(k)
        if k in ("tensor_parallel_size", "pipeline_parallel_size"):
            v = v or 1
        setattr(out, k, v)
    out.enforce_eager = bool(s.get("enforce_eager"))
    out.compile_cache = record.get("compile_cache") or "cold"
    out.kv_correction_bytes = 0
    return out


def cards_of(record: dict[str, Any], like: list[Card], util: float | None) -> list[Card]:
    """The devices as vLLM saw them at that launch: CPU node memory = requested / utilization per rank (the node
    can grow during warm-up, so the total printed later is not it); GPU cards as they are now."""
    br = record.get("breakdown") or {}
    if record.get("device") != "cpu" or not br or not util:
        return like
    out = []
    for i, (_, terms) in enumerate(sorted(br.items(), key=lambda kv: int(kv[0]))):
        base = like[min(i, len(like) - 1)] if like else Card("CPU", 0, source="cpu")
        req = terms.get("requested_gib")
        total = int(req / util * (1 << 30)) if req else int((terms.get("node_total_gib") or 0) * (1 << 30))
        out.append(replace(base, memory_total_bytes=total or base.memory_total_bytes, memory_free_bytes=None))
    return out


def measured_kv_bytes(record: dict[str, Any], bytes_per_token: int, block: int) -> int | None:
    """vLLM's KV cache per rank: from its token count (blocks x block, so half a block is added back) where it
    printed one, else its GiB figure."""
    tokens = record.get("kv_cache_tokens")
    if tokens and bytes_per_token:
        return int(tokens * bytes_per_token + block * bytes_per_token // 2)
    gib = record.get("kv_cache_gib")
    return int(gib * (1 << 30)) if gib is not None else None


def measured_terms(record: dict[str, Any]) -> list[str]:
    br = record.get("breakdown") or {}
    terms: set[str] = set()
    names = {"requested_gib": "requested memory", "non_kv_gib": "non-KV memory (the worker's resident set)",
             "device_free_gib": "free memory at start", "breakdown_weights_gib": "weights",
             "non_torch_gib": "non-torch memory", "consumed_gib": "weights + non-torch",
             "activation_peak_gib": "activation peak", "cuda_graph_memory_gib": "CUDA graphs"}
    for t in br.values():
        terms.update(names[k] for k in t if k in names)
    terms.add("KV cache")
    if not br:  # no breakdown line (INFO logs of 0.1x-0.2x, older vLLM): what its other lines imply
        terms.add("non-KV memory (back-solved: the budget less vLLM's KV cache)")
        back = {"weights_gib": "weights", "activation_peak_gib": "activation peak", "non_torch_gib": "non-torch memory",
                "activation_and_non_torch_gib": "activation peak + non-torch", "cuda_graph_estimate_gib": "CUDA graphs"}
        for t in (record.get("backsolved") or {}).values():
            terms.update(f"{back[k]} (back-solved from the log's lines)" for k in t if k in back)
    return sorted(terms)


def summary(match: Match) -> str:
    rec = match.record
    at = time.strftime("%H:%M", time.localtime(rec.get("at") or 0))
    day = time.strftime("%Y-%m-%d", time.localtime(rec.get("at") or 0))
    n = match.launches
    return (f"measured on this box at {at} ({day}) with vLLM {rec.get('vllm_version')}, {n} launch"
            f"{'es' if n != 1 else ''}")


def plan_learned(shape: ModelShape, params: PlanParams, cards: list[Card], records: list[dict[str, Any]],
                 cache_root: Path | None = None) -> Ledger:
    """The plan, corrected by the nearest measured launch on this box and planned warm where vLLM's compile cache
    holds these settings; the basis says which. `records`: refresh()'s (empty: the model alone)."""
    beh = behaviour(params.vllm_version, params.env)
    compiled = params.device != "cpu" and beh.measured_v1 and not params.enforce_eager
    warm = compiled and compile_warm(records, params, cache_root)
    if warm:
        params = replace(params, compile_cache="warm")
    match = nearest(records, params) if not params.kv_cache_memory_bytes else None
    corr = 0
    reserve_learned = False
    if match is not None and params.device != "cpu":
        cards, reserve_learned = _with_reserve(cards, match.record)
    if match is not None:
        old_params = params_of(match.record, params)
        old = plan(shape, old_params, cards_of(match.record, cards, old_params.gpu_memory_utilization
                                               or beh.default_utilization))
        got = measured_kv_bytes(match.record, old.kv_bytes_per_token_per_gpu, old.block_size)
        if got is not None and old.kv_available_bytes_per_gpu > 0:
            corr = old.kv_available_bytes_per_gpu - got
            if abs(corr) > 0.5 * max(old.budget_bytes_per_gpu, 1):
                corr, match = 0, None  # not this box's figure (another card, another model folder): ignore it
        else:
            match = None
    led = plan(shape, replace(params, kv_correction_bytes=corr), cards)
    basis = led.basis
    if match is not None:
        rec = match.record
        terms = measured_terms(rec) + (["the driver's reserve (board less CUDA's total)"] if reserve_learned else [])
        basis.update(kind="measured", summary=summary(match), measured_terms=terms,
                     measured_launch=rec.get("log"), differs=list(match.differs),
                     correction_gib=round(corr / GiB, 3), expected_error_pct=1.0)
        led.notes.append(f"{summary(match)}: the model missed {corr / GiB:+.2f} GiB per rank there"
                         + (f"; changed since: {', '.join(match.differs)} (modelled)" if match.differs else ""))
        pin = _pin(match, led)
        if pin:
            basis["pin"] = pin
            led.notes.append(f"to start with this same KV cache every time: server.kv_cache_memory_bytes = "
                             f"{pin['kv_cache_memory_bytes']} ({pin['source']})")
    else:
        basis.update(kind="modelled", summary="modelled")
    plan_env = startup_plan(params)
    if plan_env:
        basis["startup_plan"] = plan_env
        if not plan_env["on"]:
            led.notes.append(f"to skip vLLM's memory profiling on later starts: {plan_env['setting']} (vLLM "
                             "saves its measured KV cache size on the first start)")
    basis["compile_cache"] = ("warm (vLLM's compile cache holds these settings)" if warm else
                              "cold (the first start after a change compiles)" if compiled else "not compiled")
    if compiled and not warm and not led.fits:
        alt = plan(shape, replace(params, compile_cache="warm", kv_correction_bytes=corr), cards)
        if alt.fits:
            led.problems.append(Problem(
                "fits-warm-only", "warning",
                f"fits on a warm start, not on the first one: the first start compiles "
                f"(+{led.compile_bytes / GiB:.2f} GiB at its peak) and fails, but leaves the compile cache, "
                f"and the next start gets {alt.kv_available_bytes_per_gpu / GiB:.2f} GiB of KV cache "
                f"({alt.kv_cache_tokens:,} tokens)",
                "start it twice (the second start is warm), or give the first start more room "
                "(server.gpu_memory_utilization up, or server.max_model_len down)"))
    return led


def _pin(match: Match, led: Ledger) -> dict[str, Any] | None:
    """A fixed KV cache size for these exact settings, from what vLLM measured: GPU vLLM's own suggestion
    ("--kv-cache-memory=N to fit into requested memory", 0.1x+ breakdown line), CPU the KV cache it set."""
    if match.distance or led.kv_available_bytes_per_gpu <= 0:
        return None
    br = match.record.get("breakdown") or {}
    suggested = [t["kv_cache_memory_to_requested"] for t in br.values() if t.get("kv_cache_memory_to_requested")]
    if suggested:
        return {"kv_cache_memory_bytes": int(min(suggested)), "source": "vLLM's own figure for these settings "
                "(its profiling is then skipped; the compile still runs)"}
    got = measured_kv_bytes(match.record, led.kv_bytes_per_token_per_gpu, led.block_size)
    if led.device == "cpu" and match.record.get("kv_cache_tokens") and got:
        # the launch's own cache, not this plan's: the node's memory figure moves between starts on some hosts
        return {"kv_cache_memory_bytes": int(got // (1 << 20) << 20),
                "source": "what vLLM's CPU worker set at the last launch; with enforce_eager it also skips "
                          "its warm-up"}
    return None


# vLLM's own persisted startup plan (vllm/v1/worker/startup_plan.py, read in 0.32.0; 0.20.2 has none): the GPU
# worker saves its measured --kv-cache-memory under VLLM_CACHE_ROOT and later boots with the same fingerprint apply
# it, skipping the profiling and CUDA graph estimate. The CPU worker never reads it.
STARTUP_PLAN_FROM = (0, 32)


def startup_plan(params: PlanParams) -> dict[str, Any] | None:
    """The startup-plan offer for a GPU vLLM that has it and is not already told (None otherwise)."""
    version = parse_version(params.vllm_version) if params.vllm_version else None
    if params.device == "cpu" or version is None or version[:2] < STARTUP_PLAN_FROM:
        return None
    if str((params.env or {}).get("VLLM_ENABLE_STARTUP_PLAN", "")) == "1":
        return {"env": "VLLM_ENABLE_STARTUP_PLAN", "on": True,
                "source": "on: vLLM applies the plan it saved when the settings' fingerprint matches"}
    return {"env": "VLLM_ENABLE_STARTUP_PLAN", "on": False, "setting": 'server.env.VLLM_ENABLE_STARTUP_PLAN = "1"',
            "source": "vLLM >= 0.32 saves its measured KV cache size on the first start and applies it to later "
                      "starts with the same fingerprint (profiling skipped); not measured by qwen-tui"}


def _with_reserve(cards: list[Card], record: dict[str, Any]) -> tuple[list[Card], bool]:
    """Cards without NVML's reserved figure get the one this box showed: the board less the CUDA total vLLM
    printed ("Free memory on device (F/T GiB)"), instead of the typical 0.42 GiB."""
    totals = [t["device_total_gib"] for t in (record.get("breakdown") or {}).values() if t.get("device_total_gib")]
    if not totals or not cards or all(c.memory_reserved_bytes is not None for c in cards):
        return cards, False
    cuda_total = int(min(totals) * GiB)
    out = []
    for c in cards:
        reserve = c.memory_total_bytes - cuda_total
        ok = c.memory_reserved_bytes is None and 0 <= reserve < 2 * GiB  # same card kind, same driver
        out.append(replace(c, memory_reserved_bytes=reserve) if ok else c)
    return out, out != cards
