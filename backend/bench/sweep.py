"""Concurrency sweep (`qwen-tui bench --sweep 1,4,8,16,32`): one load test per level, the table the
seeds measure by hand (~200 tokens in, ~500 out; mean TTFT, per-request and total tokens/s), with
what the server itself said during each level from /metrics (peak KV cache usage, whether requests
queued, preemptions), and the levels above the ledger's max concurrency marked.

Each level is `backend.bench.loadtest.run_bench` unchanged (its definitions, its prompt sizing, its
tags that keep the prefix cache out); only the first level sends the warm-up request. While a
level's requests run, a sampler reads /metrics every SAMPLE_S seconds on its own connection.

Results are saved as JSON and CSV, with the settings they ran under, in the XDG data dir
(`~/.local/share/qwen-tui/sweeps/`); `previous()` finds the sweep before.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from backend import energy, metrics, paths
from backend.bench.loadtest import BenchConfig, BenchInputError, Progress, cli_inputs, predict, run_bench
from backend.bench.summary import burst_notes
from backend.httpclient import async_client
from backend.settings import Settings

SAMPLE_S = 0.25
MAX_LEVEL = 4096
DEFAULT_INPUT_TOKENS = 200  # the seeds' table: ~200 tokens in, ~500 out
DEFAULT_OUTPUT_TOKENS = 500

CSV_FIELDS = ("concurrency", "requests", "completed", "failed", "ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms",
              "per_request_tokens_per_s", "output_tokens_per_s", "requests_per_s", "peak_kv_cache_usage",
              "peak_waiting", "queued", "preemptions", "above_max_concurrency", "errors",
              "model", "profile", "max_model_len", "max_num_seqs", "input_tokens", "output_tokens",
              "joules_per_output_token", "output_tokens_per_s_per_w", "power_w_mean", "energy_j")
ENERGY_FIELDS = ("energy_j", "power_w_mean", "power_w_max", "joules_per_output_token", "output_tokens_per_s_per_w",
                 "power_samples", "power_limit_w", "energy_note")


def parse_levels(text: str) -> list[int]:
    """"1,4,8,16,32" -> [1, 4, 8, 16, 32]. Raises BenchInputError with what is wrong."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or not 1 <= int(part) <= MAX_LEVEL:
            raise BenchInputError(f"--sweep {text!r}: {part!r} is not a concurrency from 1 to {MAX_LEVEL} "
                                  "(give a comma list, e.g. --sweep 1,4,8,16,32)")
        if int(part) not in out:
            out.append(int(part))
    if not out:
        raise BenchInputError("--sweep needs at least one level, e.g. --sweep 1,4,8,16,32")
    return out


@dataclass
class SweepConfig:
    levels: list[int]
    input_tokens: int = DEFAULT_INPUT_TOKENS
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    requests_per_level: int | None = None  # None: max(4, 2 x the level)

    def requests_for(self, level: int) -> int:
        return self.requests_per_level or max(4, 2 * level)

    def check(self) -> None:
        if not self.levels:
            raise BenchInputError("--sweep needs at least one level, e.g. --sweep 1,4,8,16,32")
        for name in ("input_tokens", "output_tokens", "requests_per_level"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise BenchInputError(f"--{name.replace('_', '-')} must be a whole number >= 1, got {value!r}")


def config_from_args(args: Any) -> SweepConfig:
    """`bench --sweep L --input-tokens N --output-tokens N --requests-per-level N` (0 is refused, not
    replaced by the default). Raises BenchInputError."""
    def given(v: int | None, default: int) -> int:
        return default if v is None else v

    return SweepConfig(parse_levels(args.sweep), input_tokens=given(args.input_tokens, DEFAULT_INPUT_TOKENS),
                       output_tokens=given(args.output_tokens, DEFAULT_OUTPUT_TOKENS),
                       requests_per_level=args.requests_per_level)


@dataclass
class LevelProgress:
    """A level's requests: `index` of `levels` levels, at `concurrency`."""
    index: int
    levels: int
    concurrency: int
    done: int
    total: int
    in_flight: int


EventFn = Callable[[Any], None]  # LevelProgress, or a finished row (dict)


# -- /metrics during a level ------------------------------------------------------------------------
class ServerSampler:
    """Peak KV cache usage, peak waiting/running and preemptions from /metrics while a level runs."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, interval: float = SAMPLE_S) -> None:
        self.client, self.url, self.interval = client, base_url.rstrip("/") + "/metrics", interval
        self.begun = asyncio.Event()
        self.peak_kv: float | None = None
        self.peak_waiting: float | None = None
        self.peak_running: float | None = None
        self.first_preemptions: float | None = None
        self.last_preemptions: float | None = None
        self.samples = 0
        self.error: str | None = None

    async def read(self) -> None:
        try:
            resp = await self.client.get(self.url, timeout=5.0)
            if resp.status_code != 200:
                self.error = f"/metrics: HTTP {resp.status_code}"
                return
            snap = metrics.snapshot(resp.text)
        except (httpx.HTTPError, metrics.MetricsError) as e:
            self.error = f"/metrics: {e}"
            return
        self.samples += 1
        def top(old: Any, new: Any) -> Any:
            return new if old is None or (new is not None and new > old) else old

        self.peak_kv = top(self.peak_kv, snap.kv_cache_usage)
        self.peak_waiting = top(self.peak_waiting, snap.waiting)
        self.peak_running = top(self.peak_running, snap.running)
        if snap.preemptions is not None:
            if self.first_preemptions is None:
                self.first_preemptions = snap.preemptions
            self.last_preemptions = snap.preemptions

    async def run(self) -> None:
        await self.begun.wait()
        while True:
            await self.read()
            await asyncio.sleep(self.interval)

    def figures(self) -> dict[str, Any]:
        pre = (None if self.first_preemptions is None or self.last_preemptions is None
               else max(0, round(self.last_preemptions - self.first_preemptions)))
        kv, waiting = self.peak_kv, self.peak_waiting
        missed = self.samples > 0 and not self.peak_running
        if missed:  # no sample landed while a request ran: its zeros say nothing of the load (STYLE 21)
            kv = waiting = None
        return {"peak_kv_cache_usage": None if kv is None else float(f"{kv:.4g}"),  # a sliver stays > 0
                "peak_waiting": None if waiting is None else round(waiting),
                "peak_running": None if self.peak_running is None else round(self.peak_running),
                "queued": None if waiting is None else waiting > 0,
                "preemptions": pre, "metrics_samples": self.samples,
                "metrics_error": self.error or (f"none of {self.samples} /metrics samples landed while a request "
                                                "was running: peaks unknown" if missed else None)}


def kv_percent(kv: float | None, unknown: str) -> str:
    """A peak KV cache use as a percentage; a sliver is "<1 %", never "0 %" (the cache was used)."""
    if kv is None:
        return unknown
    return "<1 %" if 0 < kv < 0.005 else f"{kv * 100:.0f} %"


# -- one level, all levels --------------------------------------------------------------------------
def level_row(rep: dict[str, Any], concurrency: int, server: dict[str, Any],
              max_conc: float | None, ceiling: float | None) -> dict[str, Any]:
    ttft = rep.get("ttft_ms") or {}
    per_req = (rep.get("decode_tokens_per_s_per_request") or {}).get("p50")
    burst = bool(rep.get("itl_ms") and rep.get("completed") and burst_notes(rep))  # per request (is_burst)
    if burst:  # tokens that reached the client together give no per-request rate (STYLE 21)
        per_req = None
    return {
        "concurrency": concurrency, "requests": rep.get("requests"), "completed": rep.get("completed", 0),
        "failed": rep.get("failed", 0), "errors": list(rep.get("errors") or []),
        "ttft_ms": {"mean": ttft.get("mean"), "p50": ttft.get("p50"), "p99": ttft.get("p99")},
        "per_request_tokens_per_s": per_req, "burst": burst,
        "tpot_ms_mean": (rep.get("tpot_ms") or {}).get("mean"),
        "output_tokens_per_s": rep.get("output_tokens_per_s"), "requests_per_s": rep.get("requests_per_s"),
        "prompt_tokens": rep.get("prompt_tokens"), "max_tokens": rep.get("max_tokens"),
        "wall_s": rep.get("wall_s"), **server,
        "above_max_concurrency": bool(max_conc is not None and concurrency > max_conc),
        "above_decode_ceiling": bool(ceiling and per_req and per_req > ceiling),
        "notes": list(rep.get("notes") or []),
        **{k: rep.get(k) for k in ENERGY_FIELDS},
        **({"error": rep["error"], "fix": rep.get("fix")} if rep.get("error") else {}),
    }


def settings_record(settings: Settings) -> dict[str, Any]:
    """What a sweep ran under: the [server] keys (no key, no environment), the profile."""
    server = {k: v for k, v in settings.snapshot()["server"].items() if k not in ("env", "api_key")}
    return {"profile": getattr(settings, "profile", None), "demo": settings.demo, "server": server}


async def run_sweep(settings: Settings, cfg: SweepConfig, on_event: EventFn | None = None, *,
                    status: Mapping[str, Any] | None = None, plan: dict[str, Any] | None = None,
                    transport: httpx.AsyncBaseTransport | None = None,
                    sample_s: float = SAMPLE_S, gpus: Any = None) -> dict[str, Any]:
    """Every level in turn; returns the `bench --sweep --json` object. A level that could not run
    (no server, the warm-up failed) ends the sweep with `error`. Raises BenchInputError.
    `gpus`: a GpuMonitor whose power each level samples (energy per token); None: unknown."""
    cfg.check()
    predicted = predict(settings, status, plan)
    max_conc, ceiling = predicted.get("max_concurrency"), predicted.get("decode_ceiling_tokens_per_s")
    out: dict[str, Any] = {
        "sweep": list(cfg.levels), "input_tokens": cfg.input_tokens, "output_tokens": cfg.output_tokens,
        "requests_per_level": cfg.requests_per_level, "started_at": time.time(),
        "predicted": predicted, "settings": settings_record(settings),
        "server": {"base_url": settings.base_url, "model": settings.served_name}, "levels": []}

    def emit(event: Any) -> None:
        if on_event is not None:
            try:
                on_event(event)
            except Exception:  # a display problem must not stop the load
                pass

    async with async_client(api_key=settings.api_key, timeout=httpx.Timeout(5.0), transport=transport) as mclient:
        for i, level in enumerate(cfg.levels):
            sampler = ServerSampler(mclient, settings.base_url, sample_s)

            def progress(p: Progress, i: int = i, level: int = level, sampler: ServerSampler = sampler) -> None:
                sampler.begun.set()  # the level's load has begun (the warm-up and sizing are not sampled)
                emit(LevelProgress(i, len(cfg.levels), level, p.done, p.total, p.in_flight))

            bench = BenchConfig(requests=cfg.requests_for(level), concurrency=level, max_tokens=cfg.output_tokens,
                                prompt_tokens=cfg.input_tokens, warmup=(i == 0))
            emit(LevelProgress(i, len(cfg.levels), level, 0, bench.requests, 0))
            task = asyncio.create_task(sampler.run())
            try:
                rep = await run_bench(settings, bench, progress, status=status, plan=plan, transport=transport,
                                      gpus=gpus)
            finally:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
            if sampler.begun.is_set():
                await sampler.read()  # the state at the level's end
            row = level_row(rep, level, sampler.figures(), max_conc, ceiling)
            out["levels"].append(row)
            emit(row)
            if rep.get("error"):
                out.update(error=rep["error"], fix=rep.get("fix"))
                break
    out["finished_at"] = time.time()
    limit = next((r.get("power_limit_w") for r in out["levels"] if r.get("joules_per_output_token") is not None), None)
    out["power_cap_command"] = energy.cap_command([g.index for g in gpus.gpus], limit) if gpus is not None else None
    return out


# -- saved results ----------------------------------------------------------------------------------
def sweeps_dir() -> Path:
    return paths.data_dir() / "sweeps"


def csv_text(result: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    srv = (result.get("settings") or {}).get("server") or {}
    for r in result.get("levels") or []:
        w.writerow({
            "concurrency": r["concurrency"], "requests": r["requests"], "completed": r["completed"],
            "failed": r["failed"], "ttft_mean_ms": r["ttft_ms"]["mean"], "ttft_p50_ms": r["ttft_ms"]["p50"],
            "ttft_p99_ms": r["ttft_ms"]["p99"], "per_request_tokens_per_s": r["per_request_tokens_per_s"],
            "output_tokens_per_s": r["output_tokens_per_s"], "requests_per_s": r["requests_per_s"],
            "peak_kv_cache_usage": r["peak_kv_cache_usage"], "peak_waiting": r["peak_waiting"],
            "queued": r["queued"], "preemptions": r["preemptions"],
            "above_max_concurrency": r["above_max_concurrency"], "errors": " | ".join(r["errors"]),
            "model": srv.get("served_model_name") or srv.get("model"),
            "profile": (result.get("settings") or {}).get("profile") or "",
            "max_model_len": srv.get("max_model_len"), "max_num_seqs": srv.get("max_num_seqs"),
            "input_tokens": result.get("input_tokens"), "output_tokens": result.get("output_tokens"),
            **{k: energy.UNKNOWN if r.get(k) is None else r[k]
               for k in ("joules_per_output_token", "output_tokens_per_s_per_w", "power_w_mean", "energy_j")}})
    return buf.getvalue()


def save(result: dict[str, Any], folder: Path | None = None) -> tuple[Path, Path]:
    """Write sweep-<time>.json and .csv (atomically); returns their paths."""
    from backend.settings import atomic_write  # the CLI entry only: the console's sweep dialog does not need them

    folder = folder or sweeps_dir()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(result.get("started_at") or time.time()))
    base = folder / f"sweep-{stamp}"
    n = 1
    while base.with_suffix(".json").exists():
        n += 1
        base = folder / f"sweep-{stamp}-{n}"
    jpath, cpath = base.with_suffix(".json"), base.with_suffix(".csv")
    atomic_write(jpath, json.dumps(result, indent=2) + "\n")
    atomic_write(cpath, csv_text(result))
    return jpath, cpath


def previous(exclude: Path | None = None, folder: Path | None = None) -> dict[str, Any] | None:
    """The newest saved sweep other than `exclude` (None when there is none or it cannot be read)."""
    folder = folder or sweeps_dir()
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob("sweep-*.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        if exclude is not None and path.resolve() == Path(exclude).resolve():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("levels"), list):
            data["path"] = str(path)
            return data
    return None


# -- text --------------------------------------------------------------------------------------------
def _f(x: Any, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def per_request_text(row: dict[str, Any]) -> str:
    """Per-request tok/s: 'burst' when there is no rate, '!' above the batch-1 ceiling."""
    if row.get("burst"):
        return "burst"
    return _f(row.get("per_request_tokens_per_s"), ".1f") + ("!" if row.get("above_decode_ceiling") else "")


def table_lines(result: dict[str, Any]) -> list[str]:
    """The sweep as a table, one line per level; * marks a level above the ledger's max concurrency."""
    pred = result.get("predicted") or {}
    mc, ceiling = pred.get("max_concurrency"), pred.get("decode_ceiling_tokens_per_s")
    head = (f"{'conc':>5} {'TTFT mean':>9} {'p50':>7} {'p99':>7} {'tok/s/req':>9} {'total tok/s':>11} "
            f"{'req/s':>6} {'err':>4} {'KV peak':>7} {'queued':>6}")
    out = [head + "  (ms for TTFT)"]
    for r in result.get("levels") or []:
        kv = r.get("peak_kv_cache_usage")
        q = r.get("queued")
        out.append(f"{r['concurrency']:>4}{'*' if r['above_max_concurrency'] else ' '} "
                   f"{_f(r['ttft_ms']['mean'], '.0f'):>9} {_f(r['ttft_ms']['p50'], '.0f'):>7} "
                   f"{_f(r['ttft_ms']['p99'], '.0f'):>7} "
                   f"{per_request_text(r):>9} "
                   f"{_f(r['output_tokens_per_s'], '.1f'):>11} {_f(r['requests_per_s'], '.2f'):>6} "
                   f"{r['failed']:>4} {kv_percent(kv, 'n/a'):>7} "
                   f"{'n/a' if q is None else ('yes' if q else 'no'):>6}")
    said = []
    if mc is not None:
        said.append(f"* above the ledger's max concurrency {mc:g}x (full-length {pred.get('max_model_len')}-token "
                    f"sequences, {pred.get('source')})")
    said.append(f"batch-1 decode ceiling {ceiling:.0f} tok/s" + (" (! above it)" if any(
        r.get("above_decode_ceiling") for r in result.get("levels") or []) else "")
                if ceiling else "batch-1 decode ceiling n/a (CPU or unknown card)")
    if any(r.get("burst") for r in result.get("levels") or []):
        said.append("burst: the tokens reached the client together (short of CPU): no per-request rate")
    out += ["", *said, *energy_lines(result)]
    return out


def energy_lines(result: dict[str, Any]) -> list[str]:
    """Energy per level (J per output token, tok/s per W), or one line saying it is unknown and why."""
    levels = result.get("levels") or []
    if not any("joules_per_output_token" in r for r in levels):  # a sweep saved before energy was measured
        return []
    if all(r.get("joules_per_output_token") is None for r in levels):
        return [f"energy: {energy.UNKNOWN} ({levels[0].get('energy_note') or 'power not measured'})"]
    out = ["", f"{'conc':>5} {'J/token':>8} {'tok/s/W':>8} {'W mean':>7} {'W max':>6}  (GPU power, NVML)"]
    for r in levels:
        out.append(f"{r['concurrency']:>5} {energy.fmt(r.get('joules_per_output_token'), '.3f'):>8} "
                   f"{energy.fmt(r.get('output_tokens_per_s_per_w'), '.3f'):>8} "
                   f"{energy.fmt(r.get('power_w_mean'), '.0f'):>7} {energy.fmt(r.get('power_w_max'), '.0f'):>6}")
    if result.get("power_cap_command"):
        out.append(f"power cap, to compare: {result['power_cap_command']}")
    return out


def run_cli(settings: Settings, cfg: SweepConfig, as_json: bool, csv_path: str | None = None,
            out: Any = None, err: Any = None, save_dir: Path | None = None) -> int:
    """`qwen-tui bench --sweep`: 0 every request of every level completed, 1 otherwise, 2 bad input."""
    import sys  # the CLI entry only: the console's sweep dialog does not need it

    out, err = out or sys.stdout, err or sys.stderr
    inputs = cli_inputs(settings, cfg, err)
    if inputs is None:
        return 2
    status, plan = inputs
    gpus = energy.monitor_for(settings)  # NVML for the server's GPUs (none on the CPU build)

    def show(ev: Any) -> None:
        if as_json:
            return
        if isinstance(ev, LevelProgress) and ev.done == 0 and ev.in_flight == 0:
            err.write(f"level {ev.index + 1}/{ev.levels}: concurrency {ev.concurrency}, {ev.total} requests…\n")
        elif isinstance(ev, dict):
            err.write(f"  done: {ev['completed']}/{ev['requests']} in {_f(ev.get('wall_s'), '.1f')} s\n")
        err.flush()

    try:
        result = asyncio.run(run_sweep(settings, cfg, show, status=status, plan=plan, gpus=gpus))
    except BenchInputError as e:
        err.write(f"qwen-tui: {e}\n")
        return 2
    finally:
        if gpus is not None:
            gpus.shutdown()
    prev = previous(folder=save_dir)
    try:
        if any(r["completed"] for r in result["levels"]):  # a sweep that measured nothing is not kept
            jpath, cpath = save(result, save_dir)
            result["saved"] = {"json": str(jpath), "csv": str(cpath)}
    except OSError as e:
        err.write(f"qwen-tui: warning: the sweep could not be saved: {e}\n")
    if prev is not None:
        result["previous"] = {"path": prev.get("path"), "started_at": prev.get("started_at"),
                              "levels": prev.get("levels")}
    if csv_path:
        try:
            Path(csv_path).write_text(csv_text(result), encoding="utf-8")
        except OSError as e:
            err.write(f"qwen-tui: cannot write {csv_path}: {e.strerror}\n")
            return 2
    if as_json:
        out.write(json.dumps(result, indent=2) + "\n")
    else:
        if result.get("error"):
            err.write(f"qwen-tui: {result['error']}\n  fix: {result.get('fix') or 'see the server log'}\n")
        out.write(f"sweep: ~{cfg.input_tokens} tokens in, {cfg.output_tokens} out -> {settings.base_url} "
                  f"({settings.served_name})\n")
        out.write("\n".join(table_lines(result)) + "\n")
        for r in result["levels"]:
            for error in r["errors"]:
                out.write(f"  concurrency {r['concurrency']} error: {error}\n")
        if result.get("saved"):
            out.write(f"saved: {result['saved']['json']} (and .csv)\n")
    ok = not result.get("error") and all(r["failed"] == 0 and r["completed"] == r["requests"]
                                         for r in result["levels"])
    return 0 if ok else 1
