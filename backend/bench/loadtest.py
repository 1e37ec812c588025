"""Load test (`qwen-tui bench`): N streaming chat completions, at most C in flight, against the local
endpoint, measured beside what the memory ledger predicts.

Plain asyncio + httpx on one connection pool (loopback, trust_env=False). Each request is
backend.chat.stream.stream_chat (its SSE parsing, figures and error explanations) with vLLM's
`ignore_eos` so every request decodes exactly `max_tokens` tokens.

Before the load: GET /v1/models (is a server there, its max_model_len), a prompt sized to about
`prompt_tokens` with vLLM's /tokenize (best effort), and one warm-up request that is not counted.
Each request's prompt starts with its own number so the prefix cache cannot serve one request's
prompt to the next.

Definitions (those of `vllm bench serve`, so `benchmarks/bench_vs_vllm.py` compares like with like):
TTFT = send to the first chunk with a choice (vLLM sends it once the first token exists, even when
that token decodes to no text); latency = send to the last chunk with a choice; ITL p50/p90/p99 and
pooled_mean = gaps between consecutive chunks, pooled over all requests (it shows stalls, e.g. while
other requests prefill; chunks that reach the client together give gaps near 0); ITL mean = first to
last chunk over the tokens between them, per request, averaged (robust to such bunching); TPOT =
(latency - TTFT) / (tokens - 1) per request; tokens = the server's usage count;
per-request decode tok/s = (tokens - 1) / (latency - TTFT), as `qwen-tui chat` prints it;
output tok/s = completed requests' output tokens / wall time of the whole load.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from backend import energy
from backend.bench.summary import RequestResult, aggregate, burst_notes, capacity_notes, summary_lines
from backend.chat.stream import (
    ChatError,
    ChatResult,
    chat_body,
    explain_http_error,
    explain_transport_error,
    stream_chat,
    stuck_error,
)
from backend.httpclient import async_client
from backend.settings import Settings

READ_TIMEOUT_S = 300.0  # a stream silent this long counts as failed
_WORDS = ("the quick brown fox jumps over the lazy dog while a patient engineer measures how fast "
          "this server answers many questions at once").split()


class BenchInputError(ValueError):
    """Arguments that cannot give a meaningful run (exit code 2)."""


@dataclass
class BenchConfig:
    requests: int = 32
    concurrency: int = 8
    max_tokens: int = 128
    prompt_tokens: int = 128
    warmup: bool = True

    def check(self) -> None:
        for name in ("requests", "concurrency", "max_tokens", "prompt_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise BenchInputError(f"--{name.replace('_', '-')} must be a whole number >= 1, got {value!r}")


@dataclass
class Progress:
    """Posted when a request starts and when one ends; `completed` counts only successes."""
    completed: int
    failed: int
    in_flight: int
    total: int

    @property
    def done(self) -> int:
        return self.completed + self.failed


RequestFn = Callable[[int | str], Awaitable[RequestResult]]
ProgressFn = Callable[[Progress], None]


# -- scheduling ------------------------------------------------------------------------------------
async def run_requests(request_fn: RequestFn, n: int, concurrency: int,
                       on_progress: ProgressFn | None = None) -> tuple[list[RequestResult], float]:
    """Call request_fn(0..n-1) with at most `concurrency` in flight; (results by index, wall seconds).

    `concurrency` workers pull the next index as soon as their request ends, so the server sees a
    constant C in flight until the tail. An exception from request_fn is a failed request.
    """
    results: list[RequestResult | None] = [None] * n
    state = {"next": 0, "in_flight": 0, "completed": 0, "failed": 0}

    def report() -> None:
        if on_progress is not None:
            try:
                on_progress(Progress(state["completed"], state["failed"], state["in_flight"], n))
            except Exception:  # a display problem must not stop the load
                pass

    async def worker() -> None:
        while state["next"] < n:
            i = state["next"]
            state["next"] += 1
            state["in_flight"] += 1
            report()
            try:
                r = await request_fn(i)
            except Exception as e:
                r = RequestResult(i, error=f"{type(e).__name__}: {e}",
                                  fix="unexpected: run `qwen-tui bench --json` again and report this error")
            state["in_flight"] -= 1
            state["completed" if r.ok else "failed"] += 1
            results[i] = r
            report()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, n))))
    return [r for r in results if r is not None], time.perf_counter() - start


# -- prediction ------------------------------------------------------------------------------------
def predict(settings: Settings, status: Mapping[str, Any] | None, plan: dict[str, Any] | None) -> dict[str, Any]:
    """Max concurrency and KV tokens from the running server's log when it is the one measured,
    else from the plan; the batch-1 decode ceiling from the plan (None on the CPU backend)."""
    plan = plan or {}
    live = bool(status and status.get("state") == "ready" and status.get("max_concurrency")
                and status.get("base_url") == settings.base_url)
    src = status if live and status is not None else plan
    return {"max_concurrency": src.get("max_concurrency"), "kv_cache_tokens": src.get("kv_cache_tokens"),
            "decode_ceiling_tokens_per_s": plan.get("decode_tokens_per_s_ceiling"),
            "source": "server log" if live else ("plan" if plan else None),
            "max_model_len": settings.server_cfg.max_model_len or plan.get("max_model_len"),
            "max_num_seqs": settings.server_cfg.max_num_seqs or plan.get("max_num_seqs")}


# -- the requests ----------------------------------------------------------------------------------
def prompt_text(index: int | str, words: int, run: str = "") -> str:
    """The fixed prompt; the run's tag and the request's own number first, so no two requests share
    a cached prefix, in this run or an earlier one (a repeated run would otherwise skip prefill)."""
    body = " ".join(_WORDS[k % len(_WORDS)] for k in range(words))
    return f"Request {run}{index}. {body}".rstrip()


def run_tag() -> str:
    import secrets  # the CLI entry only: the console's bench screen does not need them

    return secrets.token_hex(3) + "-"


NO_TOKEN_FIX = ("the server took the request but streamed no token: see the server log (a tokenizer "
                "that decodes to nothing still streams tokens; none at all means the engine did not run)")
# the body `vllm bench serve` sends: usage once at the end, not on every chunk (that costs the API
# server CPU per token), and EOS ignored so each request decodes exactly max_tokens
REQUEST_EXTRA = {"ignore_eos": True, "stream_options": {"include_usage": True}}


SendFn = Callable[[list[dict[str, str]], int, ChatResult], Awaitable[None]]


def httpx_send(client: httpx.AsyncClient, base_url: str, model: str, api_key: str | None) -> SendFn:
    """Requests through the chat's stream_chat on `client` (tests give it a MockTransport)."""
    async def send(messages: list[dict[str, str]], max_tokens: int, result: ChatResult) -> None:
        async for _ in stream_chat(base_url, model, messages, max_tokens=max_tokens, temperature=0.0,
                                   api_key=api_key, result=result, extra=REQUEST_EXTRA, client=client):
            pass

    return send


def aiohttp_send(session: Any, base_url: str, model: str) -> SendFn:
    """Requests over aiohttp (backend/bench/loadstream.py: a third of httpx's CPU per streamed token)."""
    from backend.bench import (
        loadstream,  # aiohttp only once a load runs: the console's start-up and `status` never import it
    )

    async def send(messages: list[dict[str, str]], max_tokens: int, result: ChatResult) -> None:
        body = {**chat_body(model, messages, max_tokens, 0.0), **REQUEST_EXTRA}
        await loadstream.stream(session, base_url, model, body, result)

    return send


def make_request_fn(send: SendFn, words: int, max_tokens: int, run: str = "") -> RequestFn:
    async def one(index: int | str) -> RequestResult:
        res, out = ChatResult(), RequestResult(index if isinstance(index, int) else -1)
        try:
            await send([{"role": "user", "content": prompt_text(index, words, run)}], max_tokens, res)
        except ChatError as e:
            out.error, out.fix = e.message, e.fix or "see the server log"
        except httpx.TimeoutException as e:
            stuck = stuck_error(READ_TIMEOUT_S, e)
            out.error, out.fix = stuck.message, stuck.fix
        except httpx.HTTPError as e:
            out.error, out.fix = f"{type(e).__name__}: {e}", "see the server log"
        out.ttft_s = res.ttft_s
        out.latency_s = res.last_token_s if res.last_token_s is not None else res.total_s
        out.output_tokens = res.tokens
        out.prompt_tokens = res.prompt_tokens
        out.itl_s = res.itl_s
        times = res.chunk_times
        out.decode_span_s = times[-1] - times[0] if times else None
        out.decode_tokens_per_s = res.tokens_per_s
        out.burst = res.burst
        if out.error is None and res.ttft_s is None and not res.tokens:
            out.error, out.fix = "the stream ended without any token", NO_TOKEN_FIX
        out.ok = out.error is None
        return out

    return one


@contextlib.asynccontextmanager
async def stream_session(concurrency: int, api_key: str | None,
                         transport: httpx.AsyncBaseTransport | None) -> AsyncIterator[Any]:
    """The aiohttp session the streamed requests go through; None when a test gives an httpx
    transport (then they go through httpx on it)."""
    if transport is not None:
        yield None
        return
    from backend.bench import loadstream  # aiohttp only once a load runs (start-up: the console and the CLI)

    async with loadstream.new_session(concurrency, api_key, READ_TIMEOUT_S) as session:
        yield session


@dataclass
class Prepared:
    words: int
    prompt_tokens: int | None
    max_tokens: int
    max_model_len: int | None
    notes: list[str] = field(default_factory=list)


async def _get_json(client: httpx.AsyncClient, method: str, base_url: str, path: str, headers: dict[str, Any],
                    model: str, **kw: Any) -> Any:
    try:
        resp = await client.request(method, base_url + path, headers=headers, **kw)
    except httpx.TransportError as e:
        raise (explain_transport_error(base_url, e)
               or ChatError(f"{base_url}{path}: {type(e).__name__}: {e}", "see the server log")) from None
    if resp.status_code >= 400:
        raise explain_http_error(resp.status_code, resp.text, model)
    try:
        return resp.json()
    except ValueError:
        raise ChatError(f"{base_url}{path} did not answer JSON: {resp.text[:120]!r}",
                        "is this a vLLM server? check server.port") from None


async def prepare(client: httpx.AsyncClient, base_url: str, model: str, headers: dict[str, Any],
                  cfg: BenchConfig, fallback_max_model_len: int | None, run: str = "") -> Prepared:
    """Is a server there, how long may a sequence be, how many words make about P prompt tokens."""
    models = await _get_json(client, "GET", base_url, "/v1/models", headers, model)
    cards = [m for m in ((models.get("data") if isinstance(models, dict) else None) or []) if isinstance(m, dict)]
    card = next((m for m in cards if m.get("id") == model), cards[0] if cards else {})
    max_len = card.get("max_model_len") or fallback_max_model_len
    words, counted, notes = cfg.prompt_tokens, None, []

    async def count(n_words: int) -> int:
        data = await _get_json(client, "POST", base_url, "/tokenize", headers, model,
                               json={"model": model, "add_generation_prompt": True,
                                     "messages": [{"role": "user",
                                                   "content": prompt_text(cfg.requests, n_words, run)}]})
        return int(data["count"])

    try:
        if cards and model not in [m.get("id") for m in cards]:
            raise KeyError(model)  # the warm-up will say 404 and name the served model
        base, full = await count(0), await count(cfg.prompt_tokens)
        per_word = (full - base) / cfg.prompt_tokens
        words = max(0, round((cfg.prompt_tokens - base) / per_word)) if per_word > 0 else cfg.prompt_tokens
        counted = await count(words)
        if cfg.prompt_tokens < base:
            notes.append(f"the chat template alone is {base} prompt tokens")
    except (ChatError, KeyError, TypeError, ValueError):
        notes.append("the prompt could not be sized with /tokenize: about one token per word")
    max_tokens = cfg.max_tokens
    if max_len:
        prompt = counted if counted is not None else cfg.prompt_tokens
        if prompt >= max_len:
            raise BenchInputError(f"a prompt of {prompt} tokens does not fit the server's max_model_len = {max_len}")
        if prompt + max_tokens > max_len:
            max_tokens = max_len - prompt
            notes.append(f"max_tokens lowered from {cfg.max_tokens} to {max_tokens}: prompt + max_tokens "
                         f"must fit the server's max_model_len = {max_len}")
    return Prepared(words, counted, max_tokens, max_len, notes)


async def run_bench(settings: Settings, cfg: BenchConfig, on_progress: ProgressFn | None = None, *,
                    status: Mapping[str, Any] | None = None, plan: dict[str, Any] | None = None,
                    transport: httpx.AsyncBaseTransport | None = None,
                    base_url: str | None = None, model: str | None = None, gpus: Any = None) -> dict[str, Any]:
    """The whole run; returns the `bench --json` object. Never raises for a server problem: a run
    that could not start has `error` and `fix` and counts nothing. Raises BenchInputError.
    `base_url`: another server than the settings' own (a router: `bench --url`). `gpus`: a GpuMonitor
    whose power is sampled while the requests run (backend/energy.py); None: energy unknown."""
    cfg.check()
    base_url, model = (base_url or settings.base_url).rstrip("/"), model or settings.served_name
    api_key = settings.api_key
    headers: dict[str, str] = {}  # the client carries the key
    predicted = predict(settings, status, plan)
    report: dict[str, Any] = {"requests": cfg.requests, "concurrency": cfg.concurrency,
                              "max_tokens": cfg.max_tokens, **aggregate([], 0.0)}
    power = await asyncio.to_thread(energy.PowerSampler, gpus)  # may open NVML: off the loop
    report.update(power.figures(None, None))
    report.update(predicted=predicted, server={"base_url": base_url, "model": model}, notes=[])
    limits = httpx.Limits(max_connections=cfg.concurrency + 4, max_keepalive_connections=cfg.concurrency + 4)
    timeout = httpx.Timeout(connect=5.0, read=READ_TIMEOUT_S, write=30.0, pool=30.0)
    async with async_client(api_key=api_key, timeout=timeout, limits=limits, transport=transport) as client, \
            stream_session(cfg.concurrency, api_key, transport) as session:
        try:
            run = run_tag()
            prep = await prepare(client, base_url, model, headers, cfg, predicted.get("max_model_len"), run)
            send = (aiohttp_send(session, base_url, model) if session is not None
                    else httpx_send(client, base_url, model, api_key))
            one = make_request_fn(send, prep.words, prep.max_tokens, run)
            if cfg.warmup:
                warm = await one("warm-up")
                if not warm.ok:
                    raise ChatError(f"the warm-up request failed: {warm.error}", warm.fix or "see the server log")
        except ChatError as e:
            msg = f"{e.message} (fix: {e.fix})" if e.fix else e.message
            report.update(errors=[msg], error=e.message, fix=e.fix)
            return report
        report["server"]["max_model_len"] = prep.max_model_len
        predicted["max_model_len"] = prep.max_model_len or predicted["max_model_len"]
        report["max_tokens"] = prep.max_tokens
        sampling = asyncio.create_task(power.run()) if power.enabled else None
        try:
            results, wall = await run_requests(one, cfg.requests, cfg.concurrency, on_progress)
        finally:
            if sampling is not None:
                sampling.cancel()
                await asyncio.gather(sampling, return_exceptions=True)
        if power.enabled:
            await power.read()  # the draw at the end: the last trapezoid
    report.update(aggregate(results, wall))
    report.update(power.figures(report["output_tokens"], report["output_tokens_per_s"]))
    per_request = (report["prompt_tokens"] or prep.prompt_tokens or cfg.prompt_tokens) + prep.max_tokens
    report["notes"] = prep.notes + capacity_notes(predicted, cfg.concurrency, per_request) + burst_notes(report)
    return report


# -- the command line --------------------------------------------------------------------------------
def _progress_printer(stream: Any) -> ProgressFn:
    tty = hasattr(stream, "isatty") and stream.isatty()
    last = {"done": -1}

    def show(p: Progress) -> None:
        step = max(1, p.total // 10)
        if tty:
            stream.write(f"\r  {p.done}/{p.total} done, {p.in_flight} in flight, {p.failed} failed ")
            if p.done == p.total:
                stream.write("\n")
        elif p.done and p.done != last["done"] and (p.done % step == 0 or p.done == p.total):
            stream.write(f"  {p.done}/{p.total} done, {p.in_flight} in flight, {p.failed} failed\n")
        last["done"] = p.done
        stream.flush()

    return show


def cli_inputs(settings: Settings, cfg: Any, err: Any) -> tuple[Any, dict[str, Any] | None] | None:
    """What `bench` and `bench --sweep` read before a run: cfg checked (None after a one-line message
    on err when it is off: the caller exits 2), then (the server's status, the ledger's plan) for the
    prediction. The state file is a hint, never a reason to fail: its status is None when unreadable."""
    from backend.ledger import plan_for_console  # the CLI entry only: the console's screens do not need them
    from backend.server import client as supervisor_client

    try:
        cfg.check()
    except BenchInputError as e:
        err.write(f"qwen-tui: {e}\n")
        return None
    try:
        status = supervisor_client.status()
    except Exception:
        status = None
    plan, _ = plan_for_console(settings)
    return status, plan


def run_cli(settings: Settings, cfg: BenchConfig, as_json: bool, out: Any = None, err: Any = None) -> int:
    """`qwen-tui bench`: 0 all completed, 1 any failed or no server, 2 bad arguments."""
    import sys  # the CLI entry only: the console's bench screen does not need it

    out, err = out or sys.stdout, err or sys.stderr
    inputs = cli_inputs(settings, cfg, err)
    if inputs is None:
        return 2
    status, plan = inputs
    gpus = energy.monitor_for(settings)  # NVML for the server's GPUs (none on the CPU build)
    try:
        rep = asyncio.run(run_bench(settings, cfg, None if as_json else _progress_printer(err),
                                    status=status, plan=plan, gpus=gpus))
    except BenchInputError as e:
        err.write(f"qwen-tui: {e}\n")
        return 2
    finally:
        if gpus is not None:
            gpus.shutdown()
    return write_report(rep, cfg, as_json, out, err)


def write_report(rep: dict[str, Any], cfg: BenchConfig, as_json: bool, out: Any, err: Any,
                 lines: Callable[[dict[str, Any]], list[str]] = summary_lines) -> int:
    """A `bench` run's report for the CLI (the JSON object, its error with the fix, or `lines(rep)`);
    the exit status: 0 when every request completed, else 1."""
    import json  # the CLI entry only: the console's bench screen does not need it

    if as_json:
        out.write(json.dumps(rep, indent=2) + "\n")
    elif rep.get("error"):
        err.write(f"qwen-tui: {rep['error']}\n  fix: {rep.get('fix') or 'see the server log'}\n")
    else:
        out.write("\n".join(lines(rep)) + "\n")
    ok = not rep.get("error") and rep["failed"] == 0 and rep["completed"] == cfg.requests
    return 0 if ok else 1
