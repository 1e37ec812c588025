"""Predicted vs actual: the console's ledger panel puts the plan beside what vLLM printed."""

from __future__ import annotations

from typing import Any

# (row name, key in the plan JSON, key in the log-parser snapshot)
ROWS = (
    ("weights GiB per GPU", "weights_gib_per_gpu", "weights_gib"),
    ("KV cache GiB per GPU", "kv_cache_gib_per_gpu", "kv_cache_gib"),
    ("KV cache tokens", "kv_cache_tokens", "kv_cache_tokens"),
    ("max concurrency", "max_concurrency", "max_concurrency"),
)
OFF_PCT = 5.0
GIB = 1 << 30


def compare(predicted: dict[str, Any], parsed: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows {name, predicted, actual, diff_pct, off}; off is True when they differ by more than 5%.

    `predicted` is the plan's JSON (Ledger.to_dict()), `parsed` a log-parser snapshot with keys
    kv_cache_gib, kv_cache_tokens, max_concurrency, weights_gib (None or absent = not seen yet:
    diff_pct None, off False). The last row, KV bytes per token per GPU, is derived from the log's
    KV GiB and tokens (2 decimals of GiB: within ~0.1 %).
    """
    rows = []
    for name, pkey, akey in ROWS:
        rows.append(_row(name, predicted.get(pkey), (parsed or {}).get(akey)))
    # vLLM prints no bytes per token; its KV cache GiB (per GPU) over its KV tokens is that figure,
    # per GPU (each GPU holds its share of the heads for every token): the ledger's 2×-error check
    gib, tokens = (parsed or {}).get("kv_cache_gib"), (parsed or {}).get("kv_cache_tokens")
    per_gpu = round(gib * GIB / tokens) if isinstance(gib, (int, float)) and isinstance(tokens, int) and tokens > 0 \
        else None
    rows.append(_row("KV bytes per token per GPU", predicted.get("kv_bytes_per_token_per_gpu"), per_gpu))
    rows.extend(breakdown_rows(predicted, (parsed or {}).get("breakdown") or {}))
    return rows


def breakdown_rows(predicted: dict[str, Any], breakdown: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM's own terms beside the plan's, row by row, per rank (`parse-log --json`'s `breakdown`): GPU
    requested, weights + non-torch, activation peak, CUDA graphs, KV; CPU requested, non-KV, KV."""
    rows = []
    over = predicted.get("overheads_gib_per_gpu") or {}
    ranks = {r.get("rank"): r for r in predicted.get("ranks") or []}
    for key, terms in breakdown.items():
        r = int(key)
        mine = ranks.get(r)
        if mine is not None or "non_kv_gib" in terms:  # the CPU worker's terms
            mine = mine or {}
            pairs = [("requested", mine.get("requested_gib"), terms.get("requested_gib")),
                     ("non-KV", mine.get("consumed_gib"), terms.get("non_kv_gib")),
                     ("KV cache", mine.get("kv_gib"), terms.get("kv_cache_gib"))]
        else:
            w = predicted.get("weights_gib_per_gpu")
            nt = over.get("non_torch")
            consumed = terms.get("consumed_gib")
            if consumed is None and terms.get("weights_gib") is not None and terms.get("non_torch_gib") is not None:
                consumed = round(terms["weights_gib"] + terms["non_torch_gib"], 2)  # V0's profiling lines
            pairs = [("requested", predicted.get("budget_gib_per_gpu"), terms.get("requested_gib")),
                     ("weights + non-torch", None if w is None or nt is None else round(w + nt, 3),
                      consumed),
                     ("activation peak", over.get("activation_peak"), terms.get("activation_peak_gib")),
                     ("CUDA graphs", over.get("cuda_graphs") if over.get("cuda_graphs_subtracted") else 0.0,
                      terms.get("cuda_graph_memory_gib")),
                     ("KV cache", predicted.get("kv_cache_gib_per_gpu"),
                      terms.get("kv_cache_in_use_gib", terms.get("kv_cache_gib")))]
        for name, pred, act in pairs:
            if act is not None:
                rows.append(_row(f"rank {r} {name} GiB", pred, act))
    return rows


def _row(name: str, pred: Any, act: Any) -> dict[str, Any]:
    diff, off = None, False
    if isinstance(pred, (int, float)) and isinstance(act, (int, float)):
        if act:
            diff = round((pred - act) / act * 100.0, 2)
            off = abs(diff) > OFF_PCT
        else:  # vLLM printed 0: any prediction but 0 is off (no percentage)
            diff = 0.0 if not pred else None
            off = bool(pred)
    return {"name": name, "predicted": pred, "actual": act, "diff_pct": diff, "off": off}
