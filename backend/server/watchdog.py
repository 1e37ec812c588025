"""The hang watchdog: a start phase that runs far past its usual length.

A start that sits in "loading weights" or "capturing CUDA graphs" for ten minutes looks the same as a
slow one; an NCCL hang on a consumer board is the classic case. Each phase gets a deadline from the
previous start of the same settings (backend/server/startup_history.py: FACTOR x its length, at least MARGIN_S
more) or, without one, a generous DEFAULT_S. Past it, `check()` says so in words ("loading weights for
6 min (usually 40 s)") and how to dump the stacks of the server's processes (backend/stacks.py). A phase
that ends clears it: the next phase has its own deadline.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

FACTOR = 3.0
MARGIN_S = 60.0
# without history: longer than any healthy start seen (a 72B model's weights from a slow disk, a cold
# torch.compile on a laptop CPU), so that the watchdog never cries wolf on a first start
DEFAULT_S = {"starting": 600.0, "loading_weights": 1800.0, "profiling": 1800.0, "kv_cache": 600.0,
             "cuda_graphs": 1200.0}
WORDS = {"starting": "starting", "loading_weights": "loading weights", "profiling": "profiling the model",
         "kv_cache": "sizing the KV cache", "cuda_graphs": "capturing CUDA graphs"}
DUMP = "qwen-tui stacks"


def duration(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def deadline(phase: str, usual: float | None, factor: float | None = None, margin: float | None = None) -> float:
    if usual is None:
        return DEFAULT_S.get(phase, max(DEFAULT_S.values()))
    return max(usual * (FACTOR if factor is None else factor), usual + (MARGIN_S if margin is None else margin))


def check(state: str | None, phase: str | None, since: float | None, usual: Mapping[str, float],
          now: float | None = None, factor: float | None = None, margin: float | None = None) -> dict[str, Any] | None:
    """The stall of a starting server's current phase, or None (not starting, or within its deadline)."""
    if state != "starting" or not phase or phase not in WORDS or since is None:
        return None
    elapsed = (time.time() if now is None else now) - since
    had = usual.get(phase)
    limit = deadline(phase, had, factor, margin)
    if elapsed < limit:
        return None
    text = f"{WORDS[phase]} for {duration(elapsed)} (" + (
        f"usually {duration(had)}" if had is not None else
        f"no earlier start of these settings; the limit is {duration(limit)}") + ")"
    return {"phase": phase, "since": since, "elapsed_s": round(elapsed, 1), "usual_s": had,
            "deadline_s": round(limit, 1), "text": text, "dump": DUMP}
