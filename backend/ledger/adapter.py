"""From a backend.settings.Settings (and NVML readings) to the plain arguments of `core.plan`.

Model resolution, in order: `server.model` as a local folder (its config.json and *.safetensors
headers); the Hugging Face cache (server.download_dir, $HF_HUB_CACHE, $HF_HOME/hub,
~/.cache/huggingface/hub); the built-in table (shapes.lookup). Anything else is a LedgerInputError
with a message for the user.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from backend import paths
from backend.ledger import cpu_model, learned, overheads
from backend.ledger.core import Card, Ledger, PlanParams, plan
from backend.ledger.safetensors_count import count_dir
from backend.ledger.shapes import ModelShape, from_config, lookup
from backend.server import cpu_bind
from backend.settings import Settings

GiB = overheads.GiB
PLANNER_DEFAULT_GIB = 24.0  # backend.settings PLANNER["gpu_memory_gib"].default


class LedgerInputError(Exception):
    """The model or settings cannot be planned; the message says why and what to do."""


# -- model ---------------------------------------------------------------------------------------
def _hf_roots(download_dir: str | None) -> list[Path]:
    roots = []
    if download_dir:
        roots.append(Path(download_dir).expanduser())
    if os.environ.get("HF_HUB_CACHE"):
        roots.append(Path(os.environ["HF_HUB_CACHE"]).expanduser())
    if os.environ.get("HF_HOME"):
        roots.append(Path(os.environ["HF_HOME"]).expanduser() / "hub")
    roots.append(Path.home() / ".cache" / "huggingface" / "hub")
    return roots


def hf_snapshot(model: str, download_dir: str | None = None) -> Path | None:
    """The local snapshot folder of a repo id in a Hugging Face cache, if it has a config.json."""
    if model.count("/") != 1:
        return None
    repo = "models--" + model.replace("/", "--")
    for root in _hf_roots(download_dir):
        base = root / repo
        if not base.is_dir():
            continue
        ref = base / "refs" / "main"
        try:
            snap = base / "snapshots" / ref.read_text(encoding="ascii").strip()
            if (snap / "config.json").is_file():
                return snap
        except OSError:
            pass
        snaps = [s for s in (base / "snapshots").glob("*") if (s / "config.json").is_file()]
        if snaps:
            return max(snaps, key=lambda s: s.stat().st_mtime)
    return None


def shape_from_dir(path: Path, source: str = "config.json") -> ModelShape:
    cfg_path = path / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except OSError as e:
        raise LedgerInputError(f"{cfg_path}: cannot read: {e.strerror}") from None
    except ValueError as e:
        raise LedgerInputError(f"{cfg_path}: not valid JSON: {e}") from None
    try:
        shape = from_config(cfg, path.name, source=f"{source} ({path})")
    except (KeyError, TypeError, ValueError) as e:
        raise LedgerInputError(f"{cfg_path}: cannot plan this model: {e}") from None
    count = count_dir(path)
    if count is not None:
        shape = replace(shape, safetensors=count)
    return shape


_CACHE: dict[tuple[Any, ...], tuple[tuple[Any, ...], ModelShape]] = {}


def _stamp(path: Path) -> tuple[Any, ...]:
    try:
        files = [path / "config.json", *sorted(path.glob("*.safetensors"))]
        return tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    except OSError:
        return ()


def resolve_shape(model: str, download_dir: str | None = None) -> ModelShape:
    """The shape of `server.model`: local folder, Hugging Face cache, or the built-in table."""
    if not model:
        raise LedgerInputError("server.model is empty")
    path = Path(model).expanduser()
    folder = path if path.is_dir() else hf_snapshot(model, download_dir)
    if folder is not None:
        if not (folder / "config.json").is_file():
            raise LedgerInputError(f"{folder}: no config.json (is this a model folder?)")
        key, stamp = (str(folder),), _stamp(folder)
        hit = _CACHE.get(key)
        if hit and hit[0] == stamp:
            return hit[1]
        shape = shape_from_dir(folder, "config.json" if path.is_dir() else "Hugging Face cache")
        _CACHE[key] = (stamp, shape)
        return shape
    if model.startswith(("/", "./", "../", "~")) or os.sep in model.strip("/").replace("/", "", 1):
        raise LedgerInputError(f"server.model = {model!r}: no such folder")
    known = lookup(model)
    if known is None:
        raise LedgerInputError(
            f"server.model = {model!r}: not a local folder, not in the Hugging Face cache, and not "
            "in the built-in table (Qwen/Qwen2.5-{0.5B..72B}[-Instruct[-AWQ|-GPTQ-Int4|-GPTQ-Int8]], "
            "Llama-3.1-8B/70B, Qwen3-8B/14B/32B/30B-A3B, QwQ-32B). Download it, or set "
            "server.model to its folder.")
    return replace(known, source=f"built-in table ({known.name})")


# -- devices -------------------------------------------------------------------------------------
def _visible(env: dict[str, str], n: int) -> list[int] | None:
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    out = []
    for part in raw.split(","):
        part = part.strip()
        if part.isdigit() and int(part) < n:
            out.append(int(part))
    return out


def cards_from(settings: Settings, gpus: list[dict[str, Any]] | None, check_free: bool = True) -> list[Card]:
    """Cards vLLM will use: NVML readings when given, else planner.gpu_* (CPU: this machine)."""
    planner = settings.planner_cfg
    if planner.device == "cpu":
        return _cpu_cards(settings, check_free)
    if gpus:
        env = settings.env if hasattr(settings, "env") else {}
        idx = _visible(env, len(gpus))
        chosen = [gpus[i] for i in idx] if idx else list(gpus)
        out = []
        for g in chosen:
            cc = g.get("cc")
            out.append(Card(
                name=str(g.get("name") or "GPU"), memory_total_bytes=int(g["memory_total_bytes"]),
                cc=tuple(cc) if cc else None,
                memory_free_bytes=(int(g["memory_free_bytes"]) if check_free
                                   and g.get("memory_free_bytes") is not None else None),
                memory_reserved_bytes=(int(g["memory_reserved_bytes"])
                                       if g.get("memory_reserved_bytes") is not None else None),
                source="nvml"))
        return out
    n = int(planner.gpu_count or 1)
    gib = float(planner.gpu_memory_gib or PLANNER_DEFAULT_GIB)
    name = str(planner.gpu_name or "GPU")
    return [Card(name, int(gib * GiB), source="planner") for _ in range(max(1, n))]


def _cpu_cards(settings: Settings, check_free: bool) -> list[Card]:
    """One card per rank: the NUMA node vLLM's CPU worker will size that rank's KV cache from."""
    gib = float(settings.planner_cfg.gpu_memory_gib or PLANNER_DEFAULT_GIB)
    srv = settings.server_cfg
    world = max(1, int(srv.tensor_parallel_size or 1)) * max(1, int(srv.pipeline_parallel_size or 1))
    env = cpu_bind.launch_env(settings.server, dict(srv.env))
    out = []
    for b in cpu_model.bindings(env, world):
        total, avail = overheads.cpu_total_memory(b.node)
        if total is None or gib != PLANNER_DEFAULT_GIB:
            total, avail = int(gib * GiB), None
        out.append(Card(f"CPU node {b.node}", int(total), memory_free_bytes=avail if check_free else None,
                        source="cpu", numa_node=b.node, threads=b.threads))
    return out


# -- settings ------------------------------------------------------------------------------------
def params_from_settings(settings: Settings, vllm_version: str | None = None) -> PlanParams:
    s = settings.server_cfg
    env = dict(s.env)
    if settings.planner_cfg.device == "cpu":  # the binding the launch adds is what vLLM will see
        env = cpu_bind.launch_env(settings.server, env)
    auto = s.max_model_len == "auto"  # the only word the check lets through (it is written lower-case)
    mnl = None if isinstance(s.max_model_len, str) else s.max_model_len
    return PlanParams(
        model=str(s.model or ""), dtype=s.dtype, kv_cache_dtype=s.kv_cache_dtype,
        tensor_parallel_size=int(s.tensor_parallel_size or 1),
        pipeline_parallel_size=int(s.pipeline_parallel_size or 1),
        gpu_memory_utilization=s.gpu_memory_utilization,
        kv_cache_memory_bytes=s.kv_cache_memory_bytes,
        max_model_len=mnl if mnl and mnl > 0 else None,
        max_num_seqs=s.max_num_seqs, max_num_batched_tokens=s.max_num_batched_tokens,
        block_size=s.block_size, enforce_eager=s.enforce_eager,
        quantization=s.quantization, cpu_offload_gb=s.cpu_offload_gb,
        device=str(settings.planner_cfg.device or "cuda"), vllm_version=vllm_version, env=env,
        gpu_count=None, auto_max_model_len=auto)


def gpus_from_monitor(monitor: Any, with_free: bool = True) -> list[dict[str, Any]] | None:
    """The NVML readings plan_from_settings takes, from a backend.gpu.GpuMonitor (None without NVML):
    name, memory_total_bytes, cc, memory_reserved_bytes (memory info v2: the driver's own share, which
    CUDA's total, and so vLLM's budget, leaves out) and, with_free, memory_free_bytes."""
    if monitor is None or not monitor.available() or not monitor.gpus:
        return None
    samples = {s.index: s for s in monitor.sample()}
    out = []
    for g in monitor.gpus:
        if not g.memory_total_bytes:
            continue
        s = samples.get(g.index)
        out.append({"name": g.name, "memory_total_bytes": g.memory_total_bytes, "cc": g.compute_capability,
                    "memory_reserved_bytes": getattr(s, "memory_reserved_bytes", None),
                    "memory_free_bytes": s.memory_free_bytes if with_free and s is not None else None})
    return out or None


def _records() -> list[dict[str, Any]]:
    """This box's measured launches (backend/ledger/learned.py), read from the state dir's launch logs."""
    try:
        return learned.refresh(paths.state_dir())
    except Exception:  # a plan must not fail on a bad state file: it is the model alone then
        return []


def plan_from_settings(settings: Settings, gpus: list[dict[str, Any]] | None = None, vllm_version: str | None = None,
                       check_free: bool = True, learn: bool = True) -> Ledger:
    """The ledger for these settings. Raises LedgerInputError when the model cannot be resolved.

    gpus: NVML readings, one dict per device with name, memory_total_bytes, cc (tuple) and
    optionally memory_free_bytes (vLLM refuses to start when free < utilization x total).
    """
    shape = resolve_shape(str(settings.server_cfg.model or ""), settings.server_cfg.download_dir)
    params = params_from_settings(settings, vllm_version)
    cards = cards_from(settings, gpus, check_free)
    if gpus:
        params.gpu_count = len(cards)
    led = learned.plan_learned(shape, params, cards, _records()) if learn else plan(shape, params, cards)
    if led.device == "cpu" and settings.planner_cfg.gpu_memory_gib in (None, PLANNER_DEFAULT_GIB):
        note = _node_memory_note(cards)
        if note:
            led.notes.append(note)
    return led


def _node_memory_note(cards: list[Card]) -> str | None:
    """A one-node machine whose node reports much less than the machine (memory brought online as it is
    used, as on some VMs): vLLM reads the node's figure when each worker starts, so the plan can move."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            machine = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemTotal:"))
        nodes = [n for n in os.listdir("/sys/devices/system/node") if n.startswith("node") and n[4:].isdigit()]
    except (OSError, StopIteration, ValueError):
        return None
    node = cards[0].memory_total_bytes if cards else 0
    if len(nodes) == 1 and node and node < 0.9 * machine:
        return (f"NUMA node 0 reports {node / GiB:.2f} GiB of this machine's {machine / GiB:.2f} GiB (memory is "
                "brought online as it is used); vLLM sizes the KV cache from the node's figure when it starts")
    return None


def plan_for_console(settings: Settings, monitor: Any = None) -> tuple[dict[str, Any] | None, str | None]:
    """The plan JSON for the console's ledger panel, or (None, why). Never raises.

    `monitor` is a backend.gpu.GpuMonitor (or None): its static facts replace the planner's card.
    The running server's own memory is not held against it (check_free=False).
    """
    # only for the CLI or a real install: plan() stays a pure function
    from backend.server.launch import detect_install, python_for

    try:
        gpus = gpus_from_monitor(monitor, with_free=False)
        version = detect_install(python_for(settings)).version
        return plan_from_settings(settings, gpus=gpus, vllm_version=version, check_free=False).to_dict(), None
    except LedgerInputError as e:
        return None, f"no plan: {e}"
    except Exception as e:  # the panel must say something, never crash the console
        return None, f"no plan: {type(e).__name__}: {e}"
