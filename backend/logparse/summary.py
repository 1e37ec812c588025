"""Human-readable summary of a parser's state (what `qwen-tui parse-log FILE` prints)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from backend.logparse.parser import LogParser

_PHASE_WORDS = {
    "starting": "starting", "loading_weights": "loading weights", "profiling": "profiling memory",
    "kv_cache": "sizing the KV cache", "cuda_graphs": "capturing CUDA graphs", "ready": "ready",
    "failed": "FAILED", "stopped": "stopped",
}


def _dur(s: float | None) -> str:
    if s is None:
        return ""
    if s < 0:
        return "?"
    if s < 60:
        return f"{s:.2f} s" if s < 1 else f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m {sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m"


def _n(x: Any) -> str:
    if isinstance(x, bool) or x is None:
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.4f}".rstrip("0").rstrip(".") if x != int(x) else f"{int(x):,}"
    return str(x)


def format_summary(p: "LogParser") -> str:
    s = p.report()  # everything printed here is in the report (parse-log --json) too
    out: list[str] = []
    head = f"vLLM {s['vllm_version']}" if s["vllm_version"] else "vLLM (version not in the log)"
    if s["engine"]:
        head += f" · {s['engine'].upper()} engine"
    head += f" · phase: {_PHASE_WORDS.get(s['phase'], s['phase'])}"
    out.append(head)
    if s["model"]:
        out.append(f"model: {s['model']}")
    if s["listen_url"]:
        out.append(f"{'listening on' if s['ready'] else 'will listen on'} {s['listen_url']}")

    rows: list[tuple[str, str]] = []
    if s["weights_gib"] is not None or s["weights_seconds"] is not None:
        w = f"{_n(s['weights_gib'])} GiB" if s["weights_gib"] is not None else "size not logged"
        if s["weights_seconds"] is not None:
            w += f", loaded in {_dur(s['weights_seconds'])}"
        rows.append(("weights", w))
    prof = [f"{label} {_n(s[k])} GiB" for k, label in (("non_torch_gib", "non-torch"),
                                                       ("activation_peak_gib", "activation peak"))
            if s[k] is not None]
    if prof:
        rows.append(("memory profile", " · ".join(prof)))
    kv = []
    if s["kv_cache_gib"] is not None:
        kv.append(f"{_n(s['kv_cache_gib'])} GiB")
    if s["kv_cache_tokens"] is not None:
        kv.append(f"{_n(s['kv_cache_tokens'])} tokens")
    if s["gpu_blocks"] is not None:
        kv.append(f"{_n(s['gpu_blocks'])} blocks")
    if kv:
        rows.append(("KV cache", " · ".join(kv)))
    per_worker = s["kv_cache_tokens_per_worker"]
    if per_worker and len(set(per_worker)) > 1:
        rows.append(("KV per worker", f"{_n(min(per_worker))} … {_n(max(per_worker))} tokens in {len(per_worker)} "
                                      f"lines (the engine allocates the smallest)"))
    if s["max_concurrency"] is not None:
        rows.append(("concurrency", f"{_n(s['max_concurrency'])}x at {_n(s['max_concurrency_tokens'])} "
                                    f"tokens per request"))
    if s["compile_seconds"] is not None:
        rows.append(("torch.compile", _dur(s["compile_seconds"])))
    if s["cuda_graph_seconds"] is not None or s["cuda_graph_count"] is not None:
        parts = []
        if s["cuda_graph_count"] is not None:
            parts.append(f"{s['cuda_graph_count']} graphs")
        if s["cuda_graph_seconds"] is not None:
            parts.append(f"captured in {_dur(s['cuda_graph_seconds'])}")
        if s["cuda_graph_gib"] is not None:
            parts.append(f"{_n(s['cuda_graph_gib'])} GiB")
        rows.append(("CUDA graphs", ", ".join(parts)))
    if s["init_engine_seconds"] is not None:
        rows.append(("engine init", _dur(s["init_engine_seconds"])))
    if s["max_model_len"] is not None:
        rows.append(("max model len", _n(s["max_model_len"])))
    for name, ranks in s["per_rank"].items():
        rows.append((f"{name} per rank", " · ".join(f"rank {r}: {_n(v)}" for r, v in ranks.items())))
    out.append("")
    if rows:
        out.append("Figures")
        width = max(len(k) for k, _ in rows)
        out.extend(f"  {k:<{width}}  {v}" for k, v in rows)
    else:
        out.append("Figures: none in this log")

    if s["timeline"]:
        out.append("")
        out.append("Timeline (from the launch)" if s["launched_at"] is not None else "Timeline")
        for m in s["timeline"]:
            at = f"+{_dur(m['at_s'])}" if m["at_s"] is not None else "?"
            if at in ("+0.00 s", "+0.0 s"):
                at = "+0 s"
            took = f"took {_dur(m['seconds'])}" if m["seconds"] is not None else ""
            out.append(f"  {at:>9}  {m['phase']:<16} {took}".rstrip())

    failure = s["failure"]
    if failure:
        out.append("")
        again = {True: " (a restart fails the same way)", False: ""}.get(s["failure_permanent"], "")
        out.append(f"FAILED: {failure['kind']}{again}")
        out.append(f"  vLLM said: {failure['message']}")
        for line in failure.get("context") or []:  # the wrapper lines said after the root cause
            out.append(f"  then:      {line}")
        out.append(f"  fix:       {failure['fix']}")
    return "\n".join(out) + "\n"
