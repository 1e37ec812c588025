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
