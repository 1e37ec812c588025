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


def compare(predicted: dict[str, Any], parsed: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows {name, predicted, actual, diff_pct, off}; off is True when they differ by more than 5%.

    `predicted` is the plan's JSON (Ledger.to_dict()), `parsed` a log-parser snapshot with keys
    kv_cache_gib, kv_cache_tokens, max_concurrency, weights_gib (None or absent = not seen yet:
    diff_pct None, off False).
    """
    rows = []
    for name, pkey, akey in ROWS:
        pred, act = predicted.get(pkey), (parsed or {}).get(akey)
        diff, off = None, False
        if isinstance(pred, (int, float)) and isinstance(act, (int, float)):
            if act:
                diff = round((pred - act) / act * 100.0, 2)
                off = abs(diff) > OFF_PCT
            else:  # vLLM printed 0: any prediction but 0 is off (no percentage)
                diff = 0.0 if not pred else None
                off = bool(pred)
        rows.append({"name": name, "predicted": pred, "actual": act, "diff_pct": diff, "off": off})
    return rows
