"""Checks 8-12: /dev/shm, the HTTP port, the model files, disk space for a download, the server's state."""

from __future__ import annotations

import errno
import json
from pathlib import Path

from backend.doctor.context import SHM_FAIL, SHM_FIX, SHM_WARN, Check, Context, GiB, MiB, gb, gib, plural
from backend.hf_cache import hf_cache_root
from backend.hf_cache import snapshot as _snapshot
from backend.server.status import FAILING, HAS_PROCESS, in_group


# -- 8. /dev/shm -------------------------------------------------------------------------------------
def check_shm(ctx: Context) -> Check:
    path, multi = ctx.env.shm_path, ctx.world > 1
    try:
        st = ctx.env.statvfs(path)
    except OSError as e:
        if not multi:
            return Check("shm", "skip", f"cannot read {path} ({e.strerror or e}); one process group needs little")
        return Check("shm", "warn", f"cannot read {path} ({e.strerror or e}); NCCL needs shared memory", SHM_FIX)
    total, free = st.f_frsize * st.f_blocks, st.f_frsize * st.f_bavail
    def fmt(b: float) -> str:
        return f"{b / MiB:.0f} MiB" if b < GiB else gib(b)

    msg = f"{path}: {fmt(total)}, {fmt(free)} free"
    why = f"; vLLM/NCCL with {ctx.world} GPU processes need shared memory" if multi else ""
    if total <= SHM_FAIL:
        return Check("shm", "fail" if multi else "warn", f"{msg} (Docker's default is 64 MiB){why}", SHM_FIX)
    if total < SHM_WARN and multi:
        return Check("shm", "warn", f"{msg}, under 1 GiB{why}", SHM_FIX)
    if free <= SHM_FAIL and multi:
        return Check("shm", "warn", f"{msg}: almost full{why}",
                     f"remove stale files in {path} (left by killed runs), or {SHM_FIX}")
    return Check("shm", "ok", msg)


# -- 9. port -----------------------------------------------------------------------------------------
def check_port(ctx: Context) -> Check:
    host, port = str(ctx.server_cfg.host or "0.0.0.0"), int(ctx.server_cfg.port)
    err = ctx.env.bind(host, port)
    if err is None:
        return Check("port", "ok", f"{host}:{port} is free")
    st = ctx.status
    if ctx.ours_running and st.get("port") == port:
        return Check("port", "ok", f"{host}:{port} is held by the supervised server "
                     f"(vLLM pid {st.get('pid')}, {st.get('state')})")
    if err.errno == errno.EADDRINUSE:
        holders = ctx.env.port_holders(port)
        who = ", ".join(f"pid {pid} {name}" for pid, name in holders)
        stop = f"stop {who}" if holders else "stop the process that holds it (ss -ltnp shows it)"
        return Check("port", "fail", f"port {port} on {host} is in use" + (f" by {who}" if who else ""),
                     f"another port: --set server.port={port + 1} (or server.port in config.toml), or {stop}")
    if err.errno == errno.EADDRNOTAVAIL:
        return Check("port", "fail", f"cannot bind {host}:{port}: {err.strerror or err} "
                     "(not an address of this machine)", "server.host = \"127.0.0.1\" (or \"0.0.0.0\")")
    if err.errno == errno.EACCES:
        return Check("port", "fail", f"no permission to bind {host}:{port}", "server.port above 1023")
    return Check("port", "warn", f"cannot bind {host}:{port}: {err.strerror or err}")


# -- 10/11. model files and disk ---------------------------------------------------------------------
# vLLM --load-format values that read no weight files from the model folder: `dummy` makes random
# weights (vllm/model_executor/model_loader/dummy_loader.py); the others stream from elsewhere.
NO_FILE_FORMATS = {"dummy", "runai_streamer", "runai_streamer_sharded", "tensorizer"}


def load_format(extra_args: list[str]) -> str:
    """The --load-format vLLM will use: one passed in extra_args (last wins), else auto (it is no [server] key)."""
    fmt = "auto"
    for i, arg in enumerate(extra_args):
        if arg == "--load-format" and i + 1 < len(extra_args):
            fmt = extra_args[i + 1]
        elif arg.startswith("--load-format="):
            fmt = arg.split("=", 1)[1]
    return fmt


def folder_problems(folder: Path, fmt: str = "auto") -> tuple[str | None, str]:
    """(what is wrong or None, a summary of what is there) for a model folder."""
    from backend.ledger.safetensors_count import count_dir  # only for this check: `doctor` runs each check on its own

    if not (folder / "config.json").is_file():
        return f"no config.json in {folder}", ""
    if fmt in NO_FILE_FORMATS:
        return None, f"config.json; weights not checked (--load-format {fmt} reads no weight files)"
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set((json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}).values()))
        except (OSError, ValueError, AttributeError) as e:
            return f"{index.name} is unreadable ({e})", ""
        missing = [s for s in shards if not (folder / s).is_file()]
        empty = [s for s in shards if s not in missing and (folder / s).stat().st_size == 0]
        if missing or empty:
            parts = ([f"missing: {', '.join(missing)}"] if missing else []) + \
                    ([f"empty: {', '.join(empty)}"] if empty else [])
            return f"{len(missing) + len(empty)} of {len(shards)} shards in {index.name} are " + "; ".join(parts), ""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        bins = sorted(folder.glob("*.bin"))
        if bins:
            return None, f"{len(bins)} .bin weight file(s)"
        return f"no *.safetensors (or *.bin) weights in {folder}", ""
    count = count_dir(folder)
    if count is not None and count.bad_files:
        names = ", ".join(Path(b).name for b in count.bad_files[:3])
        return f"{len(count.bad_files)} weight file(s) shorter than their header says (interrupted copy?): {names}", ""
    size = sum(f.stat().st_size for f in files)
    return None, f"config.json and {len(files)} safetensors file(s), {gb(size)}"


def _is_path(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~")) or model.count("/") > 1


def check_model(ctx: Context) -> Check:
    model = str(ctx.server_cfg.model or "")
    if not model:
        return Check("model", "fail", "server.model is empty", "server.model = a repo id or a model folder")
    path = Path(model).expanduser()
    fmt = load_format(ctx.settings.extra_args)
    if path.is_dir():
        bad, summary = folder_problems(path, fmt)
        if bad:
            return Check("model", "fail", f"{path}: {bad}",
                         "copy the missing or broken files again (or download the model again) into that folder")
        return Check("model", "ok", f"local folder {path}: {summary}")
    if _is_path(model):
        return Check("model", "fail", f"server.model = {model!r}: no such folder",
                     "server.model = the folder that holds config.json, or a Hugging Face repo id")
    root = hf_cache_root(ctx.server_cfg.download_dir, ctx.server_env, ctx.env.home)
    repo_dir = root / ("models--" + model.replace("/", "--"))
    snap = _snapshot(repo_dir) if repo_dir.is_dir() else None
    offline = any(ctx.server_env.get(k, "").strip().lower() in ("1", "true", "yes")
                  for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    get = f"huggingface-cli download {model}" + (f" --cache-dir {root}" if ctx.server_cfg.download_dir else "")
    if snap is None:
        pulled = _pulled(ctx, model, root, fmt)
        if pulled is not None:
            return pulled
        size = _download_bytes(ctx)
        what = f"{model} is not downloaded (looked in {repo_dir})"
        elsewhere = [r for r in (hf_cache_root(None, ctx.server_env, ctx.env.home),
                                 hf_cache_root(None, {}, ctx.env.home)) if r != root
                     and _snapshot(r / repo_dir.name) is not None]
        if elsewhere:
            return Check("model", "fail" if offline else "warn",
                         f"{what}, but it is in {elsewhere[0]}: vLLM looks only in {root}",
                         f'server.download_dir = "{elsewhere[0]}"')
        if offline:
            return Check("model", "fail", f"{what} and HF_HUB_OFFLINE is set", f"{get} on a machine with network")
        return Check("model", "warn", f"{what}: the first start downloads it"
                     + (f" (~{gb(size)})" if size else ""),
                     f"download it first: qwen-tui pull --set-model {model} (or {get}); in the console: g")
    bad, summary = folder_problems(snap, fmt)
    partial = list((repo_dir / "blobs").glob("*.incomplete"))
    if bad or partial:
        extra = f"; {plural(len(partial), 'interrupted download')} in blobs/" if partial else ""
        return Check("model", "fail" if offline or bad and not partial else "warn",
                     f"{model} in {snap}: {bad or 'download not finished'}{extra}",
                     f"finish the download: {get}")
    return Check("model", "ok", f"{model} in the Hugging Face cache ({snap}): {summary}")


def _pulled(ctx: Context, model: str, root: Path, fmt: str) -> Check | None:
    """What `qwen-tui pull` has of this repo id in its default folder, or None."""
    from backend.pull import state as pull_state  # only for this check: `doctor` runs each check on its own
    from backend.pull.progress import overall_line
    from backend.pull.run import default_local_dir

    folder = default_local_dir(model)
    live = pull_state.running()
    if live and live.get("repo_id") == model:
        prog = overall_line(live["progress"]) if live.get("progress") else live.get("phase", "starting")
        return Check("model", "warn", f"{model} is being pulled into {live.get('local_dir') or folder}: {prog}",
                     "wait for it (qwen-tui pull --status); --set-model or the pull screen then sets server.model")
    if not folder.is_dir():
        return None
    bad, summary = folder_problems(folder, fmt)
    if bad:
        return Check("model", "warn", f"a pull of {model} into {folder} is not finished: {bad}",
                     f"qwen-tui pull --set-model {model} continues it")
    return Check("model", "warn", f"{model} was pulled into {folder} ({summary}), but server.model is the repo "
                 f"id: vLLM would download it again into {root}", f'server.model = "{folder}" '
                 f"(qwen-tui --set server.model={folder} for one run)")


def _download_bytes(ctx: Context) -> int | None:
    led, _ = ctx.plan
    return int(led.weights_bytes) if led is not None and led.weights_bytes else None


def check_disk(ctx: Context) -> Check:
    model = str(ctx.server_cfg.model or "")
    if not model or Path(model).expanduser().is_dir() or _is_path(model):
        return Check("disk", "skip", "server.model is a local folder: nothing to download")
    root = hf_cache_root(ctx.server_cfg.download_dir, ctx.server_env, ctx.env.home)
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = ctx.env.statvfs(str(probe))
    except OSError as e:
        return Check("disk", "warn", f"cannot read free space of {probe}: {e.strerror or e}")
    free = st.f_frsize * st.f_bavail
    model_check = ctx.results.get("model")
    if model_check is not None and model_check.status == "ok":
        return Check("disk", "ok", f"{gb(free)} free in {probe}; the model is already downloaded")
    if model_check is not None and "was pulled into" in model_check.message:
        return Check("disk", "ok", f"{gb(free)} free in {probe}; the model is already pulled")
    size = _download_bytes(ctx)
    if size is None:
        return Check("disk", "ok", f"{gb(free)} free in {probe}; model size unknown")
    repo_dir = root / ("models--" + model.replace("/", "--"))
    have = sum(f.stat().st_size for f in (repo_dir / "blobs").glob("*") if f.is_file()) if repo_dir.is_dir() else 0
    need = max(0, size - have)
    msg = f"{gb(free)} free in {probe}; the download needs ~{gb(need)}" + _pull_space(ctx, model, probe)
    fix = f"free space there, or set server.download_dir to a folder on a disk with {gb(need * 1.1)} free"
    if free < need:
        return Check("disk", "fail", msg, fix)
    if free < need * 1.1:
        return Check("disk", "warn", msg + " (less than 10% to spare)", fix)
    return Check("disk", "ok", msg)


def _pull_space(ctx: Context, model: str, cache_probe: Path) -> str:
    """The free space where `qwen-tui pull` would put the model, when that is another folder."""
    from backend.pull.run import default_local_dir  # only for this check: `doctor` runs each check on its own

    probe = default_local_dir(model)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe == cache_probe:
        return ""
    try:
        st = ctx.env.statvfs(str(probe))
    except OSError:
        return ""
    return f"; {gb(st.f_frsize * st.f_bavail)} free in {probe} (where qwen-tui pull puts it)"


# -- 12. the supervised server -----------------------------------------------------------------------
def check_server(ctx: Context) -> Check:
    st = ctx.status
    state = st.get("state") or "unknown"
    note = f" ({st['note']})" if st.get("note") else ""
    where = st.get("base_url") or (f"port {st['port']}" if st.get("port") else "")
    failure = st.get("failure") or {}
    if state == "stopped":
        return Check("server", "ok", "not running" + note)
    if in_group(state, HAS_PROCESS):
        up = f", up {st['uptime_s']:.0f} s" if isinstance(st.get("uptime_s"), (int, float)) else ""
        return Check("server", "ok", f"{state} at {where} (vLLM pid {st.get('pid')}{up})" + note)
    if in_group(state, FAILING):
        what = f"{failure.get('kind')}: {failure.get('message')}" if failure else (st.get("detail") or "no detail")
        head = "the last run failed" if state == "failed" else "restarting after a failure"
        return Check("server", "warn", f"{head}: {what}" + note,
                     failure.get("fix") or "qwen-tui logs shows the server log")
    return Check("server", "warn", f"state {state}" + note)
